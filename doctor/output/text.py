"""Check results as text for people: one line per finding, the tally, and the exit code.

The JSON document is :mod:`strata_doctor.output.json`.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Tuple

from strata_doctor.model import CheckResult, Finding, Severity

EXIT_READY, EXIT_FINDINGS, EXIT_USAGE, EXIT_CRASH = 0, 1, 2, 3


MARKS = {Severity.OK: "✓", Severity.INFO: "i", Severity.WARNING: "!", Severity.ERROR: "✗"}


COLORS = {Severity.OK: "green", Severity.INFO: "blue", Severity.WARNING: "yellow", Severity.ERROR: "red"}


# What a stream whose encoding lacks a symbol gets instead (PYTHONIOENCODING=latin-1, a C
# locale): the marks and the arrows of the text and the report, the map's box drawing;
# anything else becomes '?'.
ASCII = {
    "✓": "+", "✗": "x", "→": "->", "←": "<-", "—": "--", "–": "-", "≥": ">=", "≤": "<=",
    "≈": "~", "×": "x", "…": "...", "·": "*", "•": "*", "‘": "'", "’": "'", "“": '"', "”": '"',
    "─": "-", "│": "|", "┌": "+", "┐": "+", "└": "+", "┘": "+",  # the map's boxes
}


MARK_SYMBOLS = "✓✗→·"
"""The marks and arrows of check, fix and report: a stream that cannot encode one gets
:data:`ASCII` for all of them."""


def encodes_marks(encoding: str) -> bool:
    """Whether a stream in ``encoding`` can write :data:`MARK_SYMBOLS`."""
    try:
        MARK_SYMBOLS.encode(encoding)
    except (UnicodeEncodeError, LookupError):
        return False
    return True


ASCII_ERRORS = "strata-doctor-ascii"


def ascii_marks(error: UnicodeError) -> Tuple[str, int]:
    """A codecs error handler: the ASCII stand-in of each character the stream cannot encode."""
    if not isinstance(error, UnicodeEncodeError):
        raise error
    text = error.object[error.start:error.end]
    return "".join(ASCII.get(char, "?") for char in text), error.end


def fit_stream(stream: Any) -> bool:
    """Make a text stream write :data:`ASCII` stand-ins for the symbols its encoding lacks,
    instead of raising UnicodeEncodeError. True when it had to."""
    import codecs

    encoding = getattr(stream, "encoding", None) or "ascii"
    try:
        "".join(ASCII).encode(encoding)
        return False
    except UnicodeEncodeError:
        pass
    except LookupError:  # an encoding Python does not know: leave the stream alone
        return False
    try:
        codecs.lookup_error(ASCII_ERRORS)
    except LookupError:
        codecs.register_error(ASCII_ERRORS, ascii_marks)
    reconfigure = getattr(stream, "reconfigure", None)
    if reconfigure is None:
        return False
    reconfigure(errors=ASCII_ERRORS)
    return True


def exit_code(results: Sequence[CheckResult], fail_on: Severity) -> int:
    """0 ready, 1 a finding at or above ``fail_on``, 3 a check crashed."""
    if any(r.crash for r in results):
        return EXIT_CRASH
    if any(f.severity >= fail_on for r in results for f in r.findings):
        return EXIT_FINDINGS
    return EXIT_READY


# -- text ---------------------------------------------------------------------
MIN_TEXT = 40
"""The fewest columns a row's text may have beside the ids; a narrower terminal gets the
narrow layout (the text on the lines under the mark, :data:`NARROW_INDENT` in)."""
NARROW_INDENT = 4
MIN_WIDTH = 20
"""The narrowest width the text is wrapped to, whatever the terminal says."""
DETAIL_WIDTH = 96
"""Where a detail wraps when the output is no terminal (a pipe or a file)."""


def wrap_width(is_terminal: bool, columns: int) -> Optional[int]:
    """The width to wrap lines to: the terminal's ``columns`` (at least :data:`MIN_WIDTH`), or
    None, no wrapping, when the output is no terminal, so that a pipe or a file gets one line
    per row, whatever COLUMNS says (docs/exit-codes.md#text-output)."""
    if not is_terminal:
        return None
    return max(columns, MIN_WIDTH) if columns > 0 else 80


class TextStyle:
    """Marks, optional colour, the width to wrap to (None: one line per row) and ASCII marks
    for a stream that cannot encode the others."""

    def __init__(self, color: bool, width: Optional[int] = None, ascii_only: bool = False) -> None:
        self.color = color
        self.width = width
        self.ascii_only = ascii_only

    def mark(self, severity: Optional[Severity], text: str) -> str:
        """Colour ``text`` by severity (None: skipped or crashed) when colour is on."""
        if not self.color:
            return text
        import click

        if severity is None:
            return click.style(text, fg="magenta")
        return click.style(text, fg=COLORS[severity], bold=severity >= Severity.WARNING)

    def plain(self, text: str) -> str:
        """``text`` as the stream can write it: the ASCII stand-ins when it must."""
        return to_plain(text) if self.ascii_only else text


def to_plain(text: str) -> str:
    """``text`` with every symbol in :data:`ASCII` replaced by its stand-in, anything else
    beyond ASCII by '?'."""
    return "".join(ch if ch.isascii() else ASCII.get(ch, "?") for ch in text)


class _Layout:
    """Where a row's text starts and how its lines wrap."""

    def __init__(self, width: Optional[int], column: int) -> None:
        self.width = width
        self.column = column
        self.narrow = width is not None and column + 4 + MIN_TEXT > width
        self.indent = NARROW_INDENT if self.narrow else column + 4

    def row(self, mark: str, label: str, text: str) -> List[str]:
        """The row's lines: mark, id and text, wrapped under the text's column."""
        if self.narrow:
            return self.wrap(f"{mark} {label}", "", " " * 2) + self.wrap(text, " " * self.indent)
        return self.wrap(text, f"{mark} {label.ljust(self.column)}  ", " " * self.indent)

    def wrap(self, text: str, first: str, rest: Optional[str] = None,
             width: Optional[int] = None) -> List[str]:
        """``text`` after ``first``, its further lines after ``rest`` (default: as ``first``)."""
        import textwrap

        width = width or self.width
        if width is None:
            return [first + text]
        rest = first if rest is None else rest
        lines = textwrap.wrap(text, width, initial_indent=first, subsequent_indent=rest,
                              break_on_hyphens=False)
        return lines or [first.rstrip()]


def to_text(
    results: Sequence[CheckResult], code: int, style: TextStyle, verbose: bool = False, head: str = ""
) -> str:
    """flutter-doctor-like rows: a mark, the check id (with the finding's, on a row that is not
    ok: what ``--ignore`` takes), the finding's summary; under a row that is not ok (under
    every row with ``verbose``), the command that explains it. ``head`` (where the sizes came
    from) and a blank line come before them."""
    column = max((len(_label(r, f)) for r in results for f in (r.findings or [None])), default=10)
    layout = _Layout(style.width, column)
    lines: List[str] = [*layout.wrap(head, "", "  "), ""] if head else []
    for result in results:
        lines.extend(_result_lines(result, layout, style, verbose))
    lines.append("")
    lines.extend(layout.wrap(_tally(results, code), ""))
    return "\n".join(lines) + "\n"


def _label(result: CheckResult, finding: Optional[Finding]) -> str:
    """The row's id: the check's, and the finding's beside it on a row that is not ok."""
    if finding is None or finding.severity is Severity.OK:
        return result.check
    return f"{finding.check}/{finding.id}"


def _result_lines(result: CheckResult, layout: _Layout, style: TextStyle, verbose: bool) -> List[str]:
    if result.crash:
        return _marked(layout.row(style.plain("✗"), result.check,
                                  style.plain(f"crashed: {result.crash.error}")), style, None)
    if result.skip:
        lines = layout.row("?", result.check, style.plain(f"skipped: {result.skip.reason}"))
        if verbose:
            lines.extend(_pointer(f"{EXPLAIN} {result.check}", layout, style))
        return _marked(lines, style, None)
    lines = []
    for finding in result.findings:
        suffix = " (ignored)" if finding.ignored else ""
        row = layout.row(style.plain(MARKS[finding.severity]), _label(result, finding),
                         style.plain(finding.summary + suffix))
        lines.extend(_marked(row, style, finding.severity))
        if verbose:
            lines.extend(_verbose_lines(finding, layout, style))
        if verbose or finding.severity is not Severity.OK:
            lines.extend(_pointer(_more(finding), layout, style))
    return lines


def _marked(lines: List[str], style: TextStyle, severity: Optional[Severity]) -> List[str]:
    """The row's lines with its mark (the first character) coloured."""
    return [style.mark(severity, lines[0][0]) + lines[0][1:], *lines[1:]] if lines else lines


def _more(finding: Finding) -> str:
    """What explains the finding: the command that prints a built-in check's page at it, or
    the page a plug-in names (``Check.doc``)."""
    if finding.doc and not finding.doc.startswith(f"{BUILTIN_DOCS}/"):
        return finding.doc
    return f"{EXPLAIN} {finding.check}/{finding.id}"


BUILTIN_DOCS = "docs/checks"
"""Where a built-in check's page is in the source tree (``Finding.doc``)."""
EXPLAIN = "strata-doctor explain"
"""The command that prints a built-in check's page from the installed package."""


def _pointer(target: str, layout: _Layout, style: TextStyle) -> List[str]:
    """The line that says where to read more: ``→ more: strata-doctor explain CHECK/FINDING``
    (or a plug-in's page)."""
    indent = " " * layout.indent
    return layout.wrap(style.plain(f"→ more: {target}"), indent, indent + "  ")


def _verbose_lines(finding: Finding, layout: _Layout, style: TextStyle) -> List[str]:
    indent = " " * layout.indent
    lines = []
    if finding.detail:
        lines.extend(layout.wrap(style.plain(finding.detail), indent, width=layout.width or DETAIL_WIDTH))
    for ev in finding.evidence:
        lines.extend(layout.wrap(style.plain(f"· {ev.source}: {ev.value}"), indent, indent + "  "))
    if finding.fix:
        text = f"→ fix: {finding.fix.summary} (strata-doctor fix --only {finding.check})"
        lines.extend(layout.wrap(style.plain(text), indent, indent + "  "))
    return lines


TALLY_WORDS = (("error", "errors"), ("warning", "warnings"), ("info", "info"), ("ok", "ok"),
               ("skipped", "skipped"), ("crashed", "crashed"))
"""The tally's keys in order, each with its plural ("2 errors", "3 info", "2 skipped")."""


def _tally(results: Sequence[CheckResult], code: int) -> str:
    """The last line: the checks counted by their worst finding (or skipped, crashed), the verdict."""
    counts: Dict[str, int] = {}
    for result in results:
        key = "crashed" if result.crash else "skipped" if result.skip else result.worst.label
        counts[key] = counts.get(key, 0) + 1
    parts = [f"{counts[k]} {plural if counts[k] != 1 else k}" for k, plural in TALLY_WORDS if counts.get(k)]
    verdict = {EXIT_READY: "ready", EXIT_FINDINGS: "not ready", EXIT_CRASH: "a check crashed"}[code]
    return f"{', '.join(parts)}: {verdict} (exit {code})"


def quiet_lines(results: Sequence[CheckResult], fail_on: Severity) -> List[str]:
    """One line per finding at or above ``fail_on`` and per crash, for ``--quiet``."""
    lines = []
    for result in results:
        if result.crash:
            lines.append(f"strata-doctor: {result.check} crashed: {result.crash.error}")
        for f in result.findings:
            if f.severity >= fail_on:
                hint = f" (fix: strata-doctor fix --only {f.check} --apply)" if f.fix else ""
                lines.append(f"strata-doctor: {f.severity.label}: {f.check}/{f.id}: {f.summary}{hint}")
    return lines

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
# locale): the marks and the arrows of the text and the report; anything else becomes '?'.
ASCII = {
    "✓": "+", "✗": "x", "→": "->", "←": "<-", "—": "--", "–": "-", "≥": ">=", "≤": "<=",
    "≈": "~", "×": "x", "…": "...", "·": "*", "•": "*", "‘": "'", "’": "'", "“": '"', "”": '"',
}


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
class TextStyle:
    """Marks and optional colour for terminal output."""

    def __init__(self, color: bool) -> None:
        self.color = color

    def mark(self, severity: Optional[Severity], text: str) -> str:
        """Colour ``text`` by severity (None: skipped or crashed) when colour is on."""
        if not self.color:
            return text
        import click

        if severity is None:
            return click.style(text, fg="magenta")
        return click.style(text, fg=COLORS[severity], bold=severity >= Severity.WARNING)


def to_text(
    results: Sequence[CheckResult], code: int, style: TextStyle, verbose: bool = False, head: str = ""
) -> str:
    """flutter-doctor-like lines: a mark, the check id, the finding's summary; ``head`` (where
    the sizes came from) and a blank line before them."""
    width = max((len(r.check) for r in results), default=10)
    lines: List[str] = [head, ""] if head else []
    for result in results:
        lines.extend(_result_lines(result, width, style, verbose))
    lines.append("")
    lines.append(_tally(results, code))
    return "\n".join(lines) + "\n"


def _result_lines(result: CheckResult, width: int, style: TextStyle, verbose: bool) -> List[str]:
    label = result.check.ljust(width)
    if result.crash:
        return [style.mark(None, "✗") + f" {label}  crashed: {result.crash.error}"]
    if result.skip:
        return [style.mark(None, "?") + f" {label}  skipped: {result.skip.reason}"]
    lines = []
    for finding in result.findings:
        mark = style.mark(finding.severity, MARKS[finding.severity])
        suffix = " (ignored)" if finding.ignored else ""
        lines.append(f"{mark} {label}  {finding.summary}{suffix}")
        if verbose:
            lines.extend(_verbose_lines(finding, width))
    return lines


def _verbose_lines(finding: Finding, width: int) -> List[str]:
    import textwrap

    indent = " " * (width + 4)
    lines = []
    if finding.detail:
        lines.extend(textwrap.wrap(finding.detail, 96, initial_indent=indent, subsequent_indent=indent))
    for ev in finding.evidence:
        lines.append(f"{indent}· {ev.source}: {ev.value}")
    if finding.fix:
        lines.append(f"{indent}→ fix: {finding.fix.summary} (strata-doctor fix --only {finding.check})")
    if finding.doc:
        lines.append(f"{indent}? {finding.doc}")
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

"""What check, fix, report and map print to: colour only on a terminal, the ASCII marks
where a stream cannot encode the others, and the terminal's width (docs/exit-codes.md,
"Text output")."""

import os
import sys
from typing import Any, Optional

import click


def use_color(stream: Any = None) -> bool:
    """Colour only on a terminal, never under a non-empty NO_COLOR (https://no-color.org), never on
    TERM=dumb (a terminal that shows escape codes as text: Emacs' shell, some CI logs)."""
    if os.environ.get("NO_COLOR") or os.environ.get("TERM") == "dumb":
        return False
    stream = stream or sys.stdout
    return bool(getattr(stream, "isatty", lambda: False)())


def stream_encoding(stream: Any) -> str:
    """The encoding ``stream`` really reaches its reader in. Python's UTF-8 mode, which the
    C or POSIX locale turns on by itself (PEP 540), makes standard output UTF-8 whatever the
    terminal takes: there, unless PYTHONUTF8, -X utf8 or PYTHONIOENCODING asked for it, the
    locale's own codeset counts (ASCII under LC_ALL=C)."""
    encoding = str(getattr(stream, "encoding", None) or "ascii")
    if stream is None or stream not in (sys.__stdout__, sys.__stderr__) or not sys.flags.utf8_mode:
        return encoding
    if os.environ.get("PYTHONUTF8") or os.environ.get("PYTHONIOENCODING") or "utf8" in sys._xoptions:
        return encoding
    import locale

    try:
        return locale.nl_langinfo(locale.CODESET) or encoding
    except (AttributeError, ValueError):  # no nl_langinfo on this platform
        return encoding


def ascii_only(stream: Any = None) -> bool:
    """Whether ``stream`` (standard output by default) needs the ASCII marks: its encoding
    cannot encode one of the marks check, fix, report and map print (docs/exit-codes.md)."""
    from strata_doctor.output.text import encodes_marks

    return not encodes_marks(stream_encoding(sys.stdout if stream is None else stream))


def terminal_width(stream: Any = None) -> Optional[int]:
    """The width to wrap text to: the terminal's (COLUMNS first, as shutil reads it), or None
    when ``stream`` (standard output by default) is no terminal."""
    import shutil

    from strata_doctor.output.text import wrap_width

    stream = sys.stdout if stream is None else stream
    is_terminal = bool(getattr(stream, "isatty", lambda: False)())
    return wrap_width(is_terminal, shutil.get_terminal_size((80, 24)).columns if is_terminal else 0)


def echo(text: str, nl: bool = True, err: bool = False) -> None:
    """``click.echo`` with the ASCII marks where the stream needs them (click itself writes
    UTF-8 to a stream that says ASCII)."""
    if ascii_only(sys.stderr if err else sys.stdout):
        from strata_doctor.output.text import to_plain

        text = to_plain(text)
    click.echo(text, nl=nl, err=err)

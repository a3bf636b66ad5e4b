"""systemd unit and configuration files (``.service``, drop-ins, ``oomd.conf``) read by
systemd's own rules (systemd.syntax(7)); pure functions on text.

- Lines end at ``\\n``, ``\\r\\n`` or ``\\r``.
- A line whose first non-blank character is ``#`` or ``;`` is a comment, also between
  the lines of a continuation.
- A line that ends in an unescaped backslash continues on the next line: the backslash
  becomes a space and the next line is appended as it is.
- ``[Section]`` starts a section; ``Key=Value`` has blanks stripped around key and value.
  Quotes stay in the value: each setting unquotes its own value (:func:`split_command`
  does it for ``ExecStart=``).
- An empty assignment (``ExecStart=``) resets a list: the merging reader
  (:func:`strata_doctor.facts.units.unit_settings`) drops what earlier assignments said.
"""

from __future__ import annotations

import re
import shlex
from typing import List, Tuple

_LINE_END = re.compile(r"\r\n|\r|\n")
_TRAILING_BACKSLASHES = re.compile(r"\\+$")


def parse_ini(text: str) -> List[Tuple[str, str, str]]:
    """(section, key, value) of a systemd-style file, in order, continuations joined."""
    items: List[Tuple[str, str, str]] = []
    section = ""
    pending = ""  # the lines of a continuation so far, each backslash made a space
    for raw in _LINE_END.split(text.replace("\0", "")):
        stripped = raw.strip()
        if stripped[:1] in ("#", ";"):
            continue  # comments are skipped even inside a continuation
        line = pending + raw
        if _continues(raw):
            pending = line[:-1] + " "
            continue
        pending = ""
        section = _add(items, line.strip(), section)
    if pending.strip():
        _add(items, pending.strip(), section)  # a backslash on the last line: end of file ends it
    return items


def _continues(line: str) -> bool:
    """Whether ``line`` ends in a backslash that is not itself escaped."""
    match = _TRAILING_BACKSLASHES.search(line)
    return match is not None and len(match.group(0)) % 2 == 1


def _add(items: List[Tuple[str, str, str]], line: str, section: str) -> str:
    """Add one whole line's assignment; returns the section that follows it."""
    if line.startswith("[") and line.endswith("]"):
        return line[1:-1].strip()
    key, sep, value = line.partition("=")
    if sep:
        items.append((section, key.strip(), value.strip()))
    return section


def split_command(value: str) -> List[str]:
    """The words of an ``ExecStart=`` command line, quotes and backslashes resolved as
    systemd splits them; plain blank splitting when the quoting does not close."""
    try:
        return shlex.split(value, comments=False, posix=True)
    except ValueError:
        return value.split()

"""What a run read and ran, from the Root's records: the report's evidence block, its
list of what could not be read, what is absent and which programs the host lacks.

The one source of these lists for the report and for ``report --bundle``'s manifest, so
both count the same things; nothing here reads the host, only what the Root recorded.
"""

from __future__ import annotations

import errno
import os
from typing import Dict, List, Optional, Tuple

from strata_doctor.facts.cpu_policy import DETECT_VIRT
from strata_doctor.facts.engine import command_outcome
from strata_doctor.facts.oomd import OOMD_ACTIVE
from strata_doctor.output.report_model import COMMAND_LINES, CommandLine, MissingProgram
from strata_doctor.root import CommandResult, Root

ABSENT_REASONS = frozenset({"missing", "not a link", os.strerror(errno.ENOENT), os.strerror(errno.ENOTDIR)})
"""Reasons Root records for a path that is not on the host (``readlink`` of a file that is
no link among them): an answer about the host, never a read failure."""
STATUS_ANSWERS = frozenset({OOMD_ACTIVE.key, DETECT_VIRT.key})
"""Commands whose exit status is part of their answer: ``systemctl is-active`` prints
``inactive`` and exits 3, ``systemd-detect-virt --vm`` prints ``none`` and exits 1."""



def command_line(result: CommandResult) -> CommandLine:
    """A command with its outcome and shortened output."""
    lines = result.stdout.splitlines()
    output = "\n".join(lines[:COMMAND_LINES])
    if len(lines) > COMMAND_LINES:
        output += f"\n... ({len(lines) - COMMAND_LINES} more lines in the bundle)"
    if result.stderr.strip():
        output += ("\n" if output else "") + "stderr: " + result.stderr.strip().splitlines()[0]
    return CommandLine(result.display, command_outcome(result), output)


def unreadable_items(root: Root) -> List[Tuple[str, str]]:
    """(path or command, reason) for each thing that exists and could not be read.

    The one list behind the report's count and ``report --bundle``'s (its manifest's
    ``unreadable``). A path that is not there is no failure (:func:`absent_items`), nor is a
    program the host lacks (:func:`missing_programs`).
    """
    items = [(path, reason) for path, reason in sorted(root.reads.items())
             if reason is not None and reason not in ABSENT_REASONS]
    for _, result in sorted(root.commands.items()):
        failure = command_failure(result)
        if failure is not None:
            items.append((result.display, failure))
    return items


def absent_items(root: Root) -> List[Tuple[str, str]]:
    """(path, reason) for each path looked for and not on the host."""
    return [(path, reason) for path, reason in sorted(root.reads.items())
            if reason is not None and reason in ABSENT_REASONS]


def command_failure(result: CommandResult) -> Optional[str]:
    """Why a command the host has gave nothing to read (``timed out``, ``exit 1: <stderr>``),
    or None when it answered, a non-zero status that is an answer included."""
    if result.missing or result.ok:
        return None
    if result.timed_out:
        return "timed out"
    if result.key in STATUS_ANSWERS and result.stdout.strip():
        return None
    err = result.stderr.strip().splitlines()
    return command_outcome(result) + (f": {err[0]}" if err else "")


def missing_programs(root: Root) -> List[MissingProgram]:
    """Each program with a command line not found, named once, in name order."""
    asked: Dict[str, List[CommandResult]] = {}
    for _, result in sorted(root.commands.items()):
        asked.setdefault(result.argv[0], []).append(result)
    missing = []
    for program, results in sorted(asked.items()):
        gone = [r.display for r in results if r.missing]
        if gone:
            missing.append(MissingProgram(program, () if len(gone) == len(results) else tuple(gone)))
    return missing


def could_not_read(count: int) -> str:
    """The count of :func:`unreadable_items` in words, as the report and ``report --bundle``
    both say it: ``1 path or command could not be read``."""
    plural = "" if count == 1 else "s"
    return f"{count} path{plural} or command{plural} could not be read"


def root_would_add(root: Root) -> List[str]:
    """What the run could not read for want of privileges."""
    denied = [path for path, reason in sorted(root.reads.items()) if reason and "permission" in reason]
    for _, result in sorted(root.commands.items()):
        err = result.stderr.lower()
        if not result.ok and ("permission denied" in err or "access denied" in err):
            denied.append(result.display)
    return denied


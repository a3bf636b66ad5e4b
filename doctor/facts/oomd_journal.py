"""systemd-oomd's earlier kills, from its journal
(``journalctl -u systemd-oomd --no-pager -o short-iso -n 200``, key ``journalctl-oomd``)."""

import re
from typing import List, NamedTuple, Tuple

from strata_doctor.root import Command, CommandResult, Root

JOURNAL_OOMD = Command(
    "journalctl-oomd",
    ("journalctl", "-u", "systemd-oomd", "--no-pager", "-o", "short-iso", "-n", "200"),
)


class OomdKill(NamedTuple):
    """One kill systemd-oomd logged."""

    time: str
    """The journal timestamp (short-iso)."""
    cgroup: str
    """The cgroup it killed."""
    reason: str
    """What it gave as the reason (memory pressure of X above Y, or swap)."""


_KILL = re.compile(r"(?:Killed|Marked) (/\S*) (?:for killing )?due to (.+?)\s*$")


def parse_oomd_journal(text: str) -> Tuple[OomdKill, ...]:
    """Kills in ``journalctl -u systemd-oomd -o short-iso`` output, oldest first."""
    kills: List[OomdKill] = []
    for line in text.replace("\0", "").splitlines():
        match = _KILL.search(line)
        if not match:
            continue
        words = line.split()
        time = words[0] if words and words[0][:1].isdigit() else ""
        kills.append(OomdKill(time, match.group(1), match.group(2)))
    return tuple(kills)


def read_oomd_journal(root: Root) -> Tuple[Tuple[OomdKill, ...], str]:
    """(the kills in oomd's journal, why the journal could not be read: empty when it was)."""
    result = root.run(JOURNAL_OOMD)
    return (parse_oomd_journal(result.stdout) if result.ok else ()), journal_reason(result)


def journal_reason(result: CommandResult) -> str:
    """Why ``journalctl`` gave no kills to read; empty when it ran."""
    if result.missing:
        return "journalctl not found"
    if result.timed_out:
        return "journalctl timed out"
    text = (result.stdout + "\n" + result.stderr).lower()
    if "insufficient permissions" in text or "not seeing messages from other users" in text:
        return "the journal needs root or the systemd-journal group to read"
    if not result.ok:
        err = (result.stderr.strip().splitlines() or [""])[0]
        return f"journalctl exited {result.status}" + (f": {err}" if err else "")
    return ""

"""The values that flow from checks to renderers and to the applier."""

import enum
from typing import NamedTuple, Optional, Tuple


class Severity(enum.IntEnum):
    """How much a finding matters; ordered so that ``max()`` gives the worst."""

    OK = 0
    INFO = 1
    WARNING = 2
    ERROR = 3

    @property
    def label(self) -> str:
        """The lower-case name used in JSON and on the command line."""
        return self.name.lower()

    @classmethod
    def parse(cls, text: str) -> "Severity":
        """Read a severity from its label; raises ValueError naming the value."""
        try:
            return cls[text.strip().upper()]
        except KeyError:
            raise ValueError(f"unknown severity {text!r}") from None


class Evidence(NamedTuple):
    """One value read from the host, and where it came from."""

    source: str
    """A host path (``/sys/...``) or a command line (``$ systemctl show ...``)."""
    value: str
    """What was read, as text, shortened if long."""


class FileChange(NamedTuple):
    """A file the applier should write: rendered from a template, never edited in place."""

    path: str
    """Absolute host path, e.g. ``/etc/sysctl.d/60-strata-doctor.conf``."""
    template: str
    """Template file name in the templates package."""
    context: Tuple[Tuple[str, object], ...]
    """Template variables as sorted pairs, so the value stays hashable and frozen."""
    mode: int = 0o644
    """File mode to write."""


class RuntimeAction(NamedTuple):
    """Something to run after files are written, e.g. a sysctl or a daemon-reload."""

    kind: str
    """One of ``sysctl``, ``daemon-reload``, ``restart-unit``, ``write-sysfs``."""
    target: str
    """The sysctl key, unit name, or sysfs path the action touches."""
    value: str = ""
    """The value to set, where the kind has one."""


class ManualStep(NamedTuple):
    """A change the tool will not make by itself (kernel command line, BIOS)."""

    text: str
    """What the operator should do, in one or two sentences."""


class Fix(NamedTuple):
    """A proposed repair for one finding, as data; only the applier acts on it."""

    summary: str
    """One line: what the fix does."""
    files: Tuple[FileChange, ...] = ()
    """Files to write."""
    actions: Tuple[RuntimeAction, ...] = ()
    """Runtime actions to take after writing."""
    manual: Tuple[ManualStep, ...] = ()
    """Steps left to the operator."""
    takes_effect: str = "restart"
    """When the change is in effect: ``now``, ``reload``, ``restart`` or ``reboot``."""


class Finding(NamedTuple):
    """One result of one check."""

    check: str
    """The id of the check that produced it."""
    id: str
    """Stable kebab-case id of this kind of finding, unique within the check."""
    severity: Severity
    """How much it matters, before any ``--ignore``."""
    summary: str
    """One line, with the host's own numbers."""
    detail: str = ""
    """Why it matters and what to do, in a few sentences."""
    evidence: Tuple[Evidence, ...] = ()
    """The values the finding rests on."""
    fix: Optional[Fix] = None
    """The proposed repair, when there is one."""
    ignored: bool = False
    """True when the user downgraded it with ``--ignore``; ``severity`` then reads info."""
    doc: str = ""
    """Where the check is documented: ``docs/checks/<check>.md#findings`` for a built-in
    check, a plug-in's own ``doc`` otherwise."""


class Skip(NamedTuple):
    """Why a check did not run on this host."""

    check: str
    """The id of the skipped check."""
    reason: str
    """One line, e.g. 'no GPU found'."""


class Crash(NamedTuple):
    """A check that raised instead of returning findings."""

    check: str
    """The id of the check that crashed."""
    error: str
    """The exception, as ``Type: message``."""


class CheckResult(NamedTuple):
    """What one check produced on one host."""

    check: str
    """The check's id."""
    title: str
    """The check's title."""
    findings: Tuple[Finding, ...] = ()
    """Its findings, empty when skipped or crashed."""
    skip: Optional[Skip] = None
    """Set when the check did not apply."""
    crash: Optional[Crash] = None
    """Set when the check raised."""

    @property
    def worst(self) -> Severity:
        """The highest effective severity among the findings (OK when none)."""
        return max((f.severity for f in self.findings), default=Severity.OK)


def context_pairs(**values: object) -> Tuple[Tuple[str, object], ...]:
    """Freeze template variables into sorted pairs for :class:`FileChange`."""
    return tuple(sorted(values.items()))


class SizeSources(NamedTuple):
    """Where the arena and K/V sizes came from, or why one is unknown (doctor/sizes.py)."""

    arena: Optional[str] = None
    """Who gave the arena: ``--arena``, ``arena: in FILE``, or ``the routed experts of
    MODEL (NAMED BY)``; None when it is unknown."""
    kv: Optional[str] = None
    """Who gave the K/V size, as :attr:`arena`; None when it is unknown (counted as 0)."""
    arena_reason: str = ""
    """Why a model that was named gave no arena (``model X: not a GGUF file ...``); empty
    when none was named or it gave one."""
    kv_reason: str = ""
    """Why a model that was named gave no K/V size; empty as :attr:`arena_reason`."""
    arena_how: str = ""
    """The model's arithmetic for the arena, when it came from the model."""
    kv_how: str = ""
    """The model's arithmetic for the K/V cache, when it came from the model (without its
    ``= total``: the size is beside it)."""
    model: Optional[str] = None
    """The model's host path, when one was named and resolved."""
    model_by: Optional[str] = None
    """Who named the model: ``--model``, ``model: in FILE``, ``ExecStart in UNIT``..."""


__all__ = [
    "CheckResult",
    "Crash",
    "Evidence",
    "FileChange",
    "Finding",
    "Fix",
    "ManualStep",
    "RuntimeAction",
    "Severity",
    "SizeSources",
    "Skip",
    "context_pairs",
]

"""Checks: the registry of built-ins and third-party plug-ins, and the runner.

Built-in checks are listed explicitly in :data:`strata_doctor.checks.BUILTIN`. Third-party
checks register a :class:`Check` subclass in the entry-point group ``strata_doctor.checks.v1``;
one that fails to load becomes a crashed row, never a crashed run.
"""

from __future__ import annotations

import os
import re
import sys
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple, Type

from strata_doctor.check import Check as Check  # re-exported: plug-ins import it from here
from strata_doctor.context import HostContext
from strata_doctor.model import CheckResult, Crash, Finding, Severity, Skip
from strata_doctor.root import Command

ENTRY_POINT_GROUP = "strata_doctor.checks.v1"
_ID = re.compile(r"^[a-z][a-z0-9]*(-[a-z0-9]+)*$")


def valid_id(check_id: str) -> bool:
    """Whether a check id is kebab-case."""
    return bool(_ID.match(check_id))


def unknown_id(value: str, checks: Sequence[Type[Check]], unloaded: Iterable[str] = ()) -> Optional[str]:
    """Why ``CHECK`` or ``CHECK/FINDING`` (``--ignore``, ``--only``, ``--skip``) names nothing
    that ``checks`` declare: the closest known id (``did you mean ...?``), or else the known
    ids; None when it names something.

    ``unloaded`` are plug-ins that failed to load: their ids are known, their findings are
    not, so any finding of theirs is accepted, as is any finding of a check that declares
    none (:attr:`Check.findings` empty: a plug-in written before it existed).
    """
    check, slash, finding = value.partition("/")
    declared = {cls.id: cls.findings for cls in checks}
    known = sorted(set(declared) | set(unloaded))
    if check not in known:
        return unknown_word(f"unknown check {check!r}", check, known)
    findings = declared.get(check, ())
    if slash and (not finding or (findings and finding not in findings)):
        return unknown_word(f"unknown finding {finding!r} of {check}", finding, findings)
    return None


def unknown_word(said: str, word: str, known: Sequence[str]) -> str:
    """``said`` with the known word closest to ``word`` (``; did you mean 'swap'?``), or, when
    none is close, with every known one (``(known: a, b)``)."""
    close = did_you_mean(word, known)
    if close is not None:
        return f"{said}; did you mean {close!r}?"
    return f"{said} (known: {', '.join(known) or 'any id'})"


def did_you_mean(word: str, known: Iterable[str]) -> Optional[str]:
    """The known word closest to a misspelt one (difflib's ratio of at least 0.6), or None."""
    import difflib

    close = difflib.get_close_matches(word, list(known), n=1) if word else []
    return close[0] if close else None


def builtin_checks() -> Tuple[Type[Check], ...]:
    """The built-in checks, in display order."""
    from strata_doctor.checks import BUILTIN

    return BUILTIN


def plugin_checks() -> Tuple[List[Type[Check]], List[Crash]]:
    """Third-party checks from the entry-point group, and those that failed to load."""
    found: List[Type[Check]] = []
    failed: List[Crash] = []
    if not _group_may_be_declared():
        return found, failed
    from importlib.metadata import entry_points

    eps: List[Any]
    if sys.version_info >= (3, 10):
        eps = list(entry_points(group=ENTRY_POINT_GROUP))
    else:  # Python 3.9's entry_points() returns a dict of groups
        eps = list(entry_points().get(ENTRY_POINT_GROUP, []))
    for ep in eps:
        try:
            cls = ep.load()
            if not (isinstance(cls, type) and issubclass(cls, Check) and valid_id(cls.id)):
                raise TypeError("not a Check subclass with a kebab-case id")
            found.append(cls)
        except Exception as exc:  # a broken plug-in must not break the run
            failed.append(Crash(ep.name, f"failed to load: {type(exc).__name__}: {exc}"))
    return found, failed


def _group_may_be_declared() -> bool:
    """False only when no distribution on ``sys.path`` names the entry-point group.

    Loading ``importlib.metadata`` and parsing every distribution's metadata costs more
    than the rest of a replayed ``check``; a text search of each ``entry_points.txt`` is
    enough to rule plug-ins out. Anything this search cannot see (a zip on the path, an
    ``.egg``, a finder other than the standard one) answers True, and the full lookup runs.
    """
    from importlib.machinery import PathFinder

    if any(getattr(f, "find_distributions", None) and f is not PathFinder for f in sys.meta_path):
        return True
    marker = ENTRY_POINT_GROUP.encode()
    return any(_entry_may_declare(entry, marker) for entry in sys.path)


def _entry_may_declare(entry: str, marker: bytes) -> bool:
    """Whether one ``sys.path`` entry may hold a distribution that names the group: a zip,
    an ``.egg``, or an ``entry_points.txt`` with the group's name in it."""
    try:
        names = os.listdir(entry or ".")
    except NotADirectoryError:
        return True  # a zip file
    except OSError:
        return False
    return any(_distribution_may_declare(entry, name, marker) for name in names)


def _distribution_may_declare(entry: str, name: str, marker: bytes) -> bool:
    if name.endswith(".egg"):
        return True
    if not name.endswith((".dist-info", ".egg-info")):
        return False
    try:
        with open(os.path.join(entry, name, "entry_points.txt"), "rb") as handle:
            return marker in handle.read()
    except OSError:
        return False


def all_checks(with_plugins: bool = True) -> Tuple[List[Type[Check]], List[Crash]]:
    """Built-ins then plug-ins (a plug-in reusing a built-in id is refused)."""
    checks = list(builtin_checks())
    if not with_plugins:
        return checks, []
    extra, failed = plugin_checks()
    ids = {c.id for c in checks}
    for cls in extra:
        if cls.id in ids:
            failed.append(Crash(cls.id, "plug-in reuses a built-in check id"))
        else:
            checks.append(cls)
            ids.add(cls.id)
    return checks, failed


def run_checks(
    ctx: HostContext,
    checks: Iterable[Type[Check]],
    ignore: Iterable[str] = (),
) -> List[CheckResult]:
    """Run each check; a crash becomes its own row and the others still run."""
    instances = [cls() for cls in checks]
    # Every declared command starts now, together: applies() already reads some of them
    # (oomd's facts need three), and one after another they would cost their sum.
    ctx.root.run_all(cmd for c in instances for cmd in _safe_commands(c, ctx))
    skips: Dict[str, Optional[str]] = {}
    for check in instances:
        skips[check.id] = _guarded_applies(check, ctx)
    ignored = frozenset(ignore)
    return [_run_one(check, ctx, skips[check.id], ignored) for check in instances]


def _guarded_applies(check: Check, ctx: HostContext) -> Optional[str]:
    try:
        return check.applies(ctx)
    except Exception:
        return None  # let run() raise it, so the crash is reported once, as a crash


def _safe_commands(check: Check, ctx: HostContext) -> Sequence[Command]:
    try:
        return check.commands(ctx)
    except Exception:
        return ()


def _run_one(
    check: Check, ctx: HostContext, skip: Optional[str], ignored: frozenset[str]
) -> CheckResult:
    if skip is not None:
        return CheckResult(check.id, check.title, skip=Skip(check.id, skip))
    try:
        findings = tuple(check.run(ctx))
    except Exception as exc:
        return CheckResult(check.id, check.title, crash=Crash(check.id, f"{type(exc).__name__}: {exc}"))
    findings = tuple(_downgrade(f, ignored) for f in one_row(findings))
    return CheckResult(check.id, check.title, findings=findings)


def one_row(findings: Sequence[Finding]) -> Tuple[Finding, ...]:
    """A check's findings without an ok one beside a problem (a warning or an error): a row
    saying all is well above a row saying it is not reads as a contradiction. Each ok
    finding becomes a sentence of the worst finding's detail (what is fine, with its
    numbers), its evidence joins the worst's. Findings with no problem among them are kept
    as they are: an info row beside an ok one adds to it (what could not be read, say)."""
    fine = [f for f in findings if f.severity is Severity.OK]
    worst = max(findings, key=lambda f: f.severity, default=None)  # the first of the most severe
    if not fine or worst is None or worst.severity < Severity.WARNING:
        return tuple(findings)
    merged = _fold(worst, fine)
    return tuple(merged if f is worst else f for f in findings if f.severity is not Severity.OK)


def _fold(worst: Finding, fine: Sequence[Finding]) -> Finding:
    """``worst`` with each of ``fine`` as a sentence of its detail, and with their evidence."""
    parts = [worst.detail] if worst.detail else []
    evidence = list(worst.evidence)
    for finding in fine:
        parts.append(f"The rest is fine: {finding.summary}.")
        parts.extend([finding.detail] if finding.detail else [])
        evidence.extend(e for e in finding.evidence if e not in evidence)
    return worst._replace(detail=" ".join(parts), evidence=tuple(evidence))


def _downgrade(finding: Finding, ignored: frozenset[str]) -> Finding:
    if finding.severity <= Severity.INFO or not (
        finding.check in ignored or f"{finding.check}/{finding.id}" in ignored
    ):
        return finding
    return finding._replace(severity=Severity.INFO, ignored=True)

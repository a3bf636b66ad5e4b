"""From findings to a plan: rendered files with diffs, runtime actions, manual steps.

The plan is pure data; printing it is a dry run and :mod:`strata_doctor.fix.apply` carries
out exactly the same objects. The files are rendered and merged in
:mod:`strata_doctor.fix.plan_files`, the fixes asked for by option come from
:mod:`strata_doctor.fix.opt_in`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Sequence, Tuple

from strata_doctor.context import HostContext
from strata_doctor.facts.units import UNIT_DIRS
from strata_doctor.fix.opt_in import opt_in_fixes
from strata_doctor.fix.plan_files import PlannedFile, plan_files
from strata_doctor.model import CheckResult, Finding, Fix, Severity
from strata_doctor.root import Root

PLAN_SCHEMA = "strata-doctor/fix-plan/v1"


EFFECT_ORDER = ("now", "reload", "restart", "reboot")


ACTION_ORDER = ("sysctl", "write-sysfs", "daemon-reload", "restart-unit")


NUMACTL_PATHS = ("/usr/bin/numactl", "/bin/numactl", "/usr/local/bin/numactl", "/usr/sbin/numactl")


@dataclass(frozen=True)
class PlanOptions:
    """What the operator asked ``fix`` for."""

    only: Tuple[str, ...] = ()
    """Check ids (or CHECK/FINDING) to fix; empty means all."""
    skip: Tuple[str, ...] = ()
    """Check ids (or CHECK/FINDING) to leave alone."""
    reserve_node: bool = False
    """Reserve the engine's node: ``strata.slice`` plus AllowedCPUs for everyone else."""
    preflight: bool = False
    """Add ``ExecStartPre=/path/to/strata-doctor check`` to the engine unit."""
    restart: bool = False
    """Restart the engine unit after writing (live host only)."""
    force: bool = False
    """Overwrite files that lack the managed-by header."""
    check_args: Tuple[str, ...] = ()
    """What the preflight's ``check`` is given besides its own arguments: the config file in
    effect and the setting flags of this run (``--config /etc/strata-doctor.yaml``)."""


@dataclass(frozen=True)
class Answer:
    """A finding the plan answers, and how."""

    finding: str
    """``check/id`` of the finding, or ``fix/reserve-node`` and ``fix/preflight``."""
    severity: str
    """The finding's severity label before the fix."""
    summary: str
    """What the fix does."""
    takes_effect: str
    """``now``, ``reload``, ``restart`` or ``reboot``."""


@dataclass(frozen=True)
class PlannedAction:
    """A runtime action, taken after the files on a live host by root only."""

    kind: str
    """``sysctl``, ``write-sysfs``, ``daemon-reload`` or ``restart-unit``."""
    target: str
    """The sysctl key, sysfs path or unit."""
    value: str
    """The value to set, where the kind has one."""
    findings: Tuple[str, ...]
    """Findings it answers."""

    @property
    def described(self) -> str:
        """One line, e.g. ``sysctl vm.nr_hugepages=0``."""
        if self.kind == "sysctl":
            return f"sysctl -w {self.target}={self.value}"
        if self.kind == "write-sysfs":
            return f"echo {self.value} > {self.target}"
        if self.kind == "daemon-reload":
            return "systemctl daemon-reload"
        return f"systemctl restart {self.target}"


@dataclass(frozen=True)
class FixPlan:
    """Everything ``fix`` would do on one host."""

    root: str
    """The host root the plan is for."""
    unit: str
    """The engine unit."""
    answers: Tuple[Answer, ...]
    """Findings answered, in check order."""
    files: Tuple[PlannedFile, ...]
    """Files to write (unchanged ones included, marked so)."""
    actions: Tuple[PlannedAction, ...]
    """Runtime actions, in the order they run."""
    manual: Tuple[Tuple[str, str], ...]
    """(finding, text) steps left to the operator."""
    problems: Tuple[str, ...] = ()
    """Reasons the apply must not run; empty when it may."""
    notes: Tuple[str, ...] = ()
    """What else the operator should know (findings without a fix, skipped ones)."""
    live: bool = field(default=False)
    """Whether the root is ``/``."""
    configured: Tuple[str, ...] = ()
    """Checks whose fix is already written (their ``configured`` finding), in check order."""
    left_alone: Tuple[str, ...] = ()
    """``check/id`` of findings with a fix that ``--only``/``--skip`` left out."""

    @property
    def changes(self) -> Tuple[PlannedFile, ...]:
        """Files the apply would write."""
        return tuple(f for f in self.files if f.changed)

    @property
    def empty(self) -> bool:
        """True when there is nothing to write, and nothing to run on this root.

        Runtime actions run on the live host only, so a tree with nothing to write is done.
        """
        return not self.changes and not (self.actions and self.live)

    @property
    def takes_effect(self) -> str:
        """The latest moment any answered fix takes effect."""
        effects = [a.takes_effect for a in self.answers if a.takes_effect in EFFECT_ORDER]
        return max(effects, key=EFFECT_ORDER.index, default="now")


# -- building -----------------------------------------------------------------
def build_plan(ctx: HostContext, results: Sequence[CheckResult], options: PlanOptions) -> FixPlan:
    """Collect the fixes of ``results`` (plus the opt-in ones) and render them."""
    sorted_out = _sort_findings(results, options)
    picked, notes = sorted_out.picked, sorted_out.notes
    problems: List[str] = []
    picked.extend(opt_in_fixes(ctx, results, options.reserve_node, options.preflight,
                               problems, notes, options.check_args))
    answers = tuple(
        Answer(f"{f.check}/{f.id}", "requested" if f.check == "fix" else f.severity.label, fix.summary,
               fix.takes_effect)
        for f, fix in picked
    )
    files = plan_files(ctx.root, picked, options.force, problems)
    actions, manual = _plan_actions(picked, files, options.restart)
    problems.extend(_unit_problems(ctx, files))
    notes.extend(_numactl_notes(ctx.root, files, problems))
    problems.extend(f"{f.path}: {f.blocked}" for f in files if f.blocked)
    return FixPlan(
        root=str(ctx.root.base), unit=ctx.config.unit, answers=answers, files=tuple(files),
        actions=actions, manual=manual, problems=tuple(problems), notes=tuple(notes),
        live=ctx.root.live, configured=tuple(dict.fromkeys(sorted_out.configured)),
        left_alone=tuple(sorted_out.left_alone),
    )


@dataclass
class _Sorted:
    """The findings of a run, sorted by what the plan does with them."""

    picked: List[Tuple[Finding, Fix]] = field(default_factory=list)
    """Selected findings with a fix, and the fix."""
    notes: List[str] = field(default_factory=list)
    """What the plan says about the others."""
    configured: List[str] = field(default_factory=list)
    """Selected checks that say their fix is configured."""
    left_alone: List[str] = field(default_factory=list)
    """Findings with a fix that --only/--skip leave alone."""


def _sort_findings(results: Sequence[CheckResult], options: PlanOptions) -> _Sorted:
    out = _Sorted()
    for result in results:
        for finding in result.findings:
            _sort_finding(finding, _selected(finding, options), out)
    return out


def _sort_finding(finding: Finding, selected: bool, out: _Sorted) -> None:
    name = f"{finding.check}/{finding.id}"
    if finding.id == "configured" and selected:
        out.configured.append(finding.check)
    if not selected:
        if finding.fix is not None:
            out.notes.append(f"{name}: left alone (--only/--skip)")
            out.left_alone.append(name)
    elif finding.fix is not None:
        out.picked.append((finding, finding.fix))
    elif finding.severity >= Severity.WARNING:
        out.notes.append(f"{name}: no automatic fix; see `strata-doctor check -v`")


def _selected(finding: Finding, options: PlanOptions) -> bool:
    names = {finding.check, f"{finding.check}/{finding.id}"}
    if options.only and not names & set(options.only):
        return False
    return not names & set(options.skip)


def _plan_actions(
    picked: Sequence[Tuple[Finding, Fix]], files: Sequence[PlannedFile], restart: bool
) -> Tuple[Tuple[PlannedAction, ...], Tuple[Tuple[str, str], ...]]:
    changed = {f.path for f in files if f.changed}
    steps = _Steps()
    for finding, fix in picked:
        if fix.files and not any(c.path in changed for c in fix.files):
            continue  # already configured: nothing to run, nothing to restart
        steps.add(f"{finding.check}/{finding.id}", fix, restart)
    ordered = sorted(steps.actions.items(), key=lambda kv: _action_rank(kv[0][0]))
    planned = tuple(PlannedAction(k, t, v, tuple(dict.fromkeys(n))) for (k, t, v), n in ordered)
    return planned, steps.manual_steps()


@dataclass
class _Steps:
    """The runtime actions and manual steps of the fixes that change something."""

    actions: Dict[Tuple[str, str, str], List[str]] = field(default_factory=dict)
    """(kind, target, value) -> the findings that want it."""
    manual: List[Tuple[str, str]] = field(default_factory=list)
    """(findings, text), in order; a unit's restart is marked by :data:`RESTART_STEP`."""
    restarts: Dict[str, List[str]] = field(default_factory=dict)
    """Unit -> findings whose changes wait for its restart."""

    def add(self, name: str, fix: Fix, restart: bool) -> None:
        """The actions and steps of one fix; a restart left to the user is one step per unit."""
        for action in fix.actions:
            if action.kind == "restart-unit" and not restart:
                if action.target not in self.restarts:
                    self.manual.append((RESTART_STEP, action.target))  # its place in the list
                self.restarts.setdefault(action.target, []).append(name)
            else:
                self.actions.setdefault((action.kind, action.target, action.value), []).append(name)
        self.manual.extend((name, step.text) for step in fix.manual)

    def manual_steps(self) -> Tuple[Tuple[str, str], ...]:
        """The manual steps, each text once, with each unit's one restart step."""
        seen: Dict[str, Tuple[str, str]] = {}
        for name, text in self.manual:
            if name == RESTART_STEP:
                name, text = _restart_step(text, self.restarts[text])
            seen.setdefault(text, (name, text))  # a step two fixes share is listed once
        return tuple(seen.values())


RESTART_STEP = "\0restart"
"""Marks where the one restart step of a unit goes among the manual steps."""


def _restart_step(unit: str, names: Sequence[str]) -> Tuple[str, str]:
    """(findings, text) of the one step that restarts ``unit`` for every fix that needs it."""
    names = tuple(dict.fromkeys(names))
    return ", ".join(names), (f"Restart {unit} when convenient: the changes for {_and(names)} "
                              "apply at its next start.")


def _and(items: Sequence[str]) -> str:
    """``a``, ``a and b``, ``a, b and c``."""
    return " and ".join(items) if len(items) < 3 else f"{', '.join(items[:-1])} and {items[-1]}"


def _action_rank(kind: str) -> int:
    return ACTION_ORDER.index(kind) if kind in ACTION_ORDER else len(ACTION_ORDER)


def _unit_problems(ctx: HostContext, files: Sequence[PlannedFile]) -> List[str]:
    unit = ctx.config.unit
    if not any(f.path.startswith(f"/etc/systemd/system/{unit}.d/") and f.changed for f in files):
        return []
    if ctx.unit.loaded or any(ctx.root.exists(f"{d}/{unit}") for d in UNIT_DIRS):
        return []
    if ctx.unit.available:
        return [f"unit {unit} is not known to systemd here; name the engine's unit with --unit NAME"]
    if ctx.root.live:
        why = ctx.unit.reason or "systemd is not available"
        return [f"unit {unit}: {why}; its drop-ins would do nothing"]
    return []


def _numactl_notes(root: Root, files: Sequence[PlannedFile], problems: List[str]) -> List[str]:
    if not any(f.template in ("strata-numa.j2", "numactl-exec-dropin.conf.j2") and f.changed for f in files):
        return []
    if any(root.exists(p) for p in NUMACTL_PATHS):
        return []
    if any(f.template == "numactl-exec-dropin.conf.j2" and f.changed for f in files):
        problems.append("numactl is not installed, and the engine unit would start through it: "
                        "install numactl first (apt install numactl / dnf install numactl)")
        return []
    return ["numactl is not installed: /usr/local/bin/strata-numa refuses to run until it is"]


# -- output -------------------------------------------------------------------
def plan_data(plan: FixPlan) -> Dict[str, Any]:
    """The plan as plain data (``strata-doctor/fix-plan/v1``)."""
    return {
        "schema": PLAN_SCHEMA,
        "root": plan.root,
        "unit": plan.unit,
        "answers": [vars(a) for a in plan.answers],
        "files": [
            {"path": f.path, "mode": f"{f.mode:04o}", "status": f.status, "template": f.template,
             "findings": list(f.findings), "diff": f.diff(), "content": f.content,
             "blocked": f.blocked or None}
            for f in plan.files
        ],
        "actions": [
            {"kind": a.kind, "target": a.target, "value": a.value, "findings": list(a.findings),
             "taken": plan.live}
            for a in plan.actions
        ],
        "manual": [{"finding": n, "text": t} for n, t in plan.manual],
        "takes_effect": plan.takes_effect,
        "problems": list(plan.problems),
        "notes": list(plan.notes),
        "changes": len(plan.changes),
    }

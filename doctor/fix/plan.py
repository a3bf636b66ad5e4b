"""From findings to a plan: rendered files with diffs, runtime actions, manual steps.

The plan is pure data; printing it is a dry run and :mod:`strata_doctor.fix.apply` carries
out exactly the same objects. Templates are rendered with Jinja2's StrictUndefined, so a
missing variable is an error, never an empty string in a unit file.
"""

from __future__ import annotations

import difflib
import errno
import os
import stat
from dataclasses import dataclass, field, replace
from typing import Any, Dict, List, Optional, Sequence, Tuple

from strata_doctor.context import HostContext
from strata_doctor.facts.units import UNIT_DIRS
from strata_doctor.model import CheckResult, FileChange, Finding, Fix, Severity
from strata_doctor.root import Root

PLAN_SCHEMA = "strata-doctor/fix-plan/v1"


MANAGED_MARKER = "Managed by strata-doctor"
"""Text every generated file carries; a file without it is not overwritten without --force."""


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
class PlannedFile:
    """One file the apply will write, with what is there now."""

    path: str
    """Host path, e.g. ``/etc/sysctl.d/60-strata-doctor.conf``."""
    mode: int
    """Mode to write."""
    content: str
    """The full new content."""
    template: str
    """Template it was rendered from."""
    findings: Tuple[str, ...]
    """``check/id`` of each finding it answers."""
    current: Optional[bytes] = None
    """What is there now; None when absent."""
    current_mode: Optional[int] = None
    """Mode of what is there now."""
    blocked: str = ""
    """Why it cannot be written (a symlink, a directory, not ours without --force)."""

    @property
    def status(self) -> str:
        """``create``, ``replace``, ``mode`` (same bytes, other mode) or ``unchanged``."""
        if self.current is None:
            return "create"
        if self.current != self.content.encode():
            return "replace"
        return "mode" if self.current_mode != self.mode else "unchanged"

    @property
    def changed(self) -> bool:
        """Whether the apply would write this file."""
        return self.status != "unchanged"

    def diff(self) -> str:
        """A unified diff from what is there to the new content."""
        old = (self.current or b"").decode("utf-8", "replace").splitlines(keepends=True)
        new = self.content.splitlines(keepends=True)
        before = "/dev/null" if self.current is None else f"a{self.path}"
        lines = list(difflib.unified_diff(old, new, before, f"b{self.path}"))
        if self.status == "mode":
            return f"mode {self.current_mode or 0:04o} -> {self.mode:04o}: {self.path}\n"
        return "".join(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n"
                       for line in lines)


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
    picked: List[Tuple[Finding, Fix]] = []
    notes: List[str] = []
    problems: List[str] = []
    configured: List[str] = []
    left_alone: List[str] = []
    for result in results:
        for finding in result.findings:
            name = f"{finding.check}/{finding.id}"
            if finding.id == "configured" and _selected(finding, options):
                configured.append(finding.check)
            if not _selected(finding, options):
                if finding.fix is not None:
                    notes.append(f"{name}: left alone (--only/--skip)")
                    left_alone.append(name)
                continue
            if finding.fix is not None:
                picked.append((finding, finding.fix))
            elif finding.severity >= Severity.WARNING:
                notes.append(f"{name}: no automatic fix; see `strata-doctor check -v`")
    picked.extend(_opt_in_fixes(ctx, results, options, problems, notes))
    answers = tuple(
        Answer(f"{f.check}/{f.id}", "requested" if f.check == "fix" else f.severity.label, fix.summary,
               fix.takes_effect)
        for f, fix in picked
    )
    files = _plan_files(ctx.root, picked, options.force, problems)
    actions, manual = _plan_actions(picked, files, options.restart)
    problems.extend(_unit_problems(ctx, files))
    notes.extend(_numactl_notes(ctx.root, files, problems))
    problems.extend(f"{f.path}: {f.blocked}" for f in files if f.blocked)
    return FixPlan(
        root=str(ctx.root.base), unit=ctx.config.unit, answers=answers, files=tuple(files),
        actions=actions, manual=manual, problems=tuple(problems), notes=tuple(notes),
        live=ctx.root.live, configured=tuple(dict.fromkeys(configured)), left_alone=tuple(left_alone),
    )


def _selected(finding: Finding, options: PlanOptions) -> bool:
    names = {finding.check, f"{finding.check}/{finding.id}"}
    if options.only and not names & set(options.only):
        return False
    return not names & set(options.skip)


def _opt_in_fixes(
    ctx: HostContext, results: Sequence[CheckResult], options: PlanOptions, problems: List[str],
    notes: List[str],
) -> List[Tuple[Finding, Fix]]:
    from strata_doctor.fix.binding import preflight_fix, reserve_node_fix

    extra: List[Tuple[Finding, Fix]] = []
    if options.reserve_node:
        binding = ctx.binding_plan
        contention = [f for r in results for f in r.findings
                      if f.check == "cpu-contention" and f.severity > Severity.OK]
        finding = contention[0] if contention else Finding("fix", "reserve-node", Severity.INFO, "")
        if binding is None:
            problems.append("--reserve-node: no node to reserve (one NUMA node, no GPU, or --numa off)")
        else:
            # The files name the option, never the finding (shared-cpus before an apply,
            # configured after it): a second apply then finds nothing to change.
            fix, why = reserve_node_fix(ctx, binding, "--reserve-node")
            if fix is None:
                problems.append(why)
            else:
                extra.append((finding, fix))
    if options.preflight:
        script, where = preflight_script(ctx.root)
        if where == "missing":
            problems.append(f"--preflight: {script} is not an executable file, so the engine unit "
                            "could not start; install strata-doctor as README.md says (its script "
                            "linked to /usr/local/bin/strata-doctor), or set STRATA_DOCTOR_SCRIPT")
        else:
            finding = Finding("fix", "preflight", Severity.INFO, "")
            extra.append((finding, preflight_fix(ctx.config.unit, "--preflight", script)))
            if where == "this machine":
                notes.append(f"--preflight: {script} is not inside {ctx.root.base}; the path is taken "
                             "from this machine")
    return extra


SCRIPT_ENV = "STRATA_DOCTOR_SCRIPT"
"""Names the script ``ExecStartPre=`` runs, when the running one is not the one to use."""


def running_script() -> str:
    """The absolute path of the installed ``strata-doctor`` console script.

    ``$STRATA_DOCTOR_SCRIPT`` if set; else the running script when it is called
    strata-doctor (not resolved: the /usr/local/bin link stays the link); else the one on
    ``PATH``; else the one beside the running Python (a virtual environment's bin).
    """
    import shutil
    import sys

    named = os.environ.get(SCRIPT_ENV, "")
    if named:
        return os.path.abspath(named)
    argv0 = sys.argv[0] if sys.argv else ""
    if os.path.basename(argv0) == "strata-doctor" and os.sep in argv0:
        return os.path.abspath(argv0)
    found = shutil.which("strata-doctor")
    if found:
        return os.path.abspath(found)
    return os.path.join(os.path.dirname(os.path.abspath(sys.executable)), "strata-doctor")


def preflight_script(root: Root) -> Tuple[str, str]:
    """(path, where): where is ``root``, ``this machine`` (a --root tree without it) or ``missing``."""
    script = running_script()

    def runnable(path: str) -> bool:
        return os.path.isfile(path) and os.access(path, os.X_OK)

    if runnable(str(root.path(script))):
        return script, "root"
    if not root.live and runnable(script):
        return script, "this machine"
    return script, "missing"


def _plan_files(
    root: Root, picked: Sequence[Tuple[Finding, Fix]], force: bool, problems: List[str]
) -> List[PlannedFile]:
    by_path: Dict[str, List[Tuple[str, FileChange]]] = {}
    for finding, fix in picked:
        for change in fix.files:
            by_path.setdefault(change.path, []).append((f"{finding.check}/{finding.id}", change))
    files: List[PlannedFile] = []
    for path, changes in by_path.items():
        planned = _merge(path, changes, problems)
        if planned is not None:
            files.append(_with_current(root, planned, force))
    return files


def _merge(path: str, changes: List[Tuple[str, FileChange]], problems: List[str]) -> Optional[PlannedFile]:
    names = tuple(dict.fromkeys(name for name, _ in changes))
    first = changes[0][1]
    if len({c.template for _, c in changes}) > 1 or len({c.mode for _, c in changes}) > 1:
        problems.append(f"{path}: fixes for {', '.join(names)} want different files there")
        return None
    contexts = [dict(c.context) for _, c in changes]
    if len(changes) > 1 and all("settings" in c for c in contexts):
        merged = _merge_settings(path, contexts, problems)
        if merged is None:
            return None
        context: Dict[str, Any] = dict(contexts[0], settings=merged, finding=", ".join(names))
    else:
        context = dict(contexts[0])
        context.setdefault("finding", ", ".join(names))
        rendered = {render_template(c.template, dict(dict(c.context), finding=context["finding"]))
                    for _, c in changes}
        if len(rendered) > 1:
            problems.append(f"{path}: fixes for {', '.join(names)} want different contents")
            return None
    return PlannedFile(path, first.mode, render_template(first.template, context), first.template, names)


def _merge_settings(path: str, contexts: List[Dict[str, Any]], problems: List[str]) -> Optional[List[Any]]:
    merged: Dict[str, Tuple[Any, ...]] = {}
    for context in contexts:
        for setting in context["settings"]:
            key = setting[0]
            if key in merged and str(merged[key][1]) != str(setting[1]):
                problems.append(f"{path}: two fixes set {key} to {merged[key][1]} and {setting[1]}")
                return None
            merged.setdefault(key, tuple(setting))
    return list(merged.values())


def _with_current(root: Root, planned: PlannedFile, force: bool) -> PlannedFile:
    real = root.path(planned.path)
    try:
        info = os.lstat(real)
    except FileNotFoundError:
        return planned
    except OSError as exc:
        return replace(planned, blocked=f"cannot inspect: {exc.strerror}")
    if stat.S_ISLNK(info.st_mode):
        return replace(planned, current=b"", blocked="is a symlink; strata-doctor never writes through one")
    if not stat.S_ISREG(info.st_mode):
        return replace(planned, current=b"", blocked="exists and is not a regular file")
    current = read_no_follow(str(real))
    mode = stat.S_IMODE(info.st_mode)
    planned = replace(planned, current=current, current_mode=mode)
    text = (current or b"").decode("utf-8", "replace")
    if planned.changed and MANAGED_MARKER not in text and not force:
        return replace(planned, blocked="exists and was not written by strata-doctor; --force overwrites "
                       "it (the original is kept for --revert)")
    return planned


def read_no_follow(path: str) -> Optional[bytes]:
    """Read a file without following a symlink at its last component."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except OSError as exc:
        if exc.errno in (errno.ENOENT, errno.ELOOP):
            return None
        raise
    with os.fdopen(fd, "rb") as handle:
        return handle.read()


def _plan_actions(
    picked: Sequence[Tuple[Finding, Fix]], files: Sequence[PlannedFile], restart: bool
) -> Tuple[Tuple[PlannedAction, ...], Tuple[Tuple[str, str], ...]]:
    changed = {f.path for f in files if f.changed}
    actions: Dict[Tuple[str, str, str], List[str]] = {}
    manual: List[Tuple[str, str]] = []
    restarts: Dict[str, List[str]] = {}  # unit -> findings whose changes wait for its restart
    for finding, fix in picked:
        name = f"{finding.check}/{finding.id}"
        if fix.files and not any(c.path in changed for c in fix.files):
            continue  # already configured: nothing to run, nothing to restart
        for action in fix.actions:
            if action.kind == "restart-unit" and not restart:
                if action.target not in restarts:
                    manual.append((RESTART_STEP, action.target))  # its place in the list
                restarts.setdefault(action.target, []).append(name)
                continue
            actions.setdefault((action.kind, action.target, action.value), []).append(name)
        manual.extend((name, step.text) for step in fix.manual)
    ordered = sorted(actions.items(), key=lambda kv: _action_rank(kv[0][0]))
    planned = tuple(PlannedAction(k, t, v, tuple(dict.fromkeys(n))) for (k, t, v), n in ordered)
    seen: Dict[str, Tuple[str, str]] = {}
    for name, text in manual:
        if name == RESTART_STEP:
            name, text = _restart_step(text, restarts[text])
        seen.setdefault(text, (name, text))  # a step two fixes share is listed once
    return planned, tuple(seen.values())


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


# -- templates ----------------------------------------------------------------
def render_template(name: str, context: Dict[str, Any]) -> str:
    """Render one template from the templates package; a missing variable raises."""
    return str(_environment().get_template(name).render(**context))


def _environment() -> Any:
    from strata_doctor.templates import environment

    return environment()


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

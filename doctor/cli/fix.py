"""``strata-doctor fix``: show the plan; ``--apply`` carries it out; ``--revert`` undoes it.

Exit codes: 0 the plan was shown, or applied and the host is ready; 1 applied, and the
re-run check still finds an error; 2 usage error, a plan that cannot be applied (shown
or asked to apply: the dry run exits as ``--apply`` would), a
missing privilege, another ``fix`` holding the lock (without ``--wait``), or an apply or
revert that failed (its changes are rolled back, or revertible); 3 a check crashed.

``--apply`` takes the lock before the checks run and holds it until the apply ends, so the
plan it carries out is the one made from the tree as it is under the lock.
"""

from __future__ import annotations

import json
import sys
from typing import Any, Dict, List, Optional, Sequence, Tuple

import click

from strata_doctor.cli.options import (
    RELEASE_POOL_FLAG,
    SETTING_FLAGS,
    UsageFailure,
    complete_ids,
    echo,
    host_from_kwargs,
    host_options,
    known_ids,
    open_host,
    require_privilege,
    run_selected,
    setting_args,
    setting_option,
)
from strata_doctor.model import CheckResult, Finding, Severity

RESULT_SCHEMA = "strata-doctor/fix-result/v1"


@click.command("fix")
@host_options
@click.option("--apply", "do_apply", is_flag=True, help="Carry out the plan (needs root on /).")
@click.option("--revert", is_flag=True, help="Undo the last apply, byte for byte.")
@click.option("--only", multiple=True, metavar="ID", shell_complete=complete_ids,
              help="Fix only this check (or CHECK/FINDING).")
@click.option("--skip", multiple=True, metavar="ID", shell_complete=complete_ids,
              help="Leave this check (or CHECK/FINDING) alone.")
@setting_option(RELEASE_POOL_FLAG)
@click.option("--reserve-node", is_flag=True,
              help="Give the engine its node's CPUs alone (strata.slice); everyone else moves off.")
@click.option("--preflight", is_flag=True, help="Run `strata-doctor check` before every engine start.")
@click.option("--restart", is_flag=True, help="Restart the engine unit after applying (live host only).")
@click.option("--force", is_flag=True, help="Overwrite files strata-doctor did not write.")
@click.option("--wait", is_flag=True,
              help="When another `fix --apply/--revert` holds the lock, wait for it instead of exiting 2.")
@click.option("-y", "--yes", is_flag=True, help="Do not ask; never asked without a terminal anyway.")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
def fix_command(do_apply: bool, revert: bool, only: Tuple[str, ...], skip: Tuple[str, ...],
                reserve_node: bool, preflight: bool, restart: bool, force: bool,
                wait: bool, yes: bool, fmt: str, **kwargs: Any) -> None:
    """Show how to fix what `check` finds; --apply fixes it, --revert undoes it."""
    options = host_from_kwargs(kwargs)
    _refuse_misuse(options, only, skip, do_apply, revert)
    if revert:
        require_privilege(options.root, True)
        sys.exit(_revert(options.root, force, fmt, wait))
    from strata_doctor.fix.plan import PlanOptions

    require_privilege(options.root, do_apply)
    asked = PlanOptions(only, skip, reserve_node, preflight, restart, force)
    sys.exit(_apply(options, asked, fmt, wait, yes) if do_apply else _show(options, asked, fmt))


def _refuse_misuse(options: Any, only: Tuple[str, ...], skip: Tuple[str, ...], do_apply: bool,
                   revert: bool) -> None:
    """Stop, exit 2, on options that name no check or that exclude each other."""
    known_ids(only, "--only")
    known_ids(skip, "--skip")
    if do_apply and revert:
        raise UsageFailure("--apply and --revert exclude each other")
    if (do_apply or revert) and options.bundle:
        raise UsageFailure("--bundle replays a report: there is no host tree to change; use --root DIR")


def _plan(options: Any, asked: Any) -> Tuple[Any, Any, List[CheckResult], Any]:
    """Open the host, run every check and plan their fixes: (root, context, results, plan)."""
    from dataclasses import replace

    from strata_doctor.fix.plan import build_plan

    root, ctx = open_host(options)
    if asked.preflight:
        asked = replace(asked, check_args=preflight_args(options, ctx))
    before = run_selected(ctx, (), ())
    return root, ctx, before, build_plan(ctx, before, asked)


def preflight_args(options: Any, ctx: Any) -> Tuple[str, ...]:
    """What the preflight's check is given, so that the unit's start checks what this run
    saw: the config file in effect (``--config /etc/strata-doctor.yaml`` when the root has
    one), then the setting flags given here that ``check`` takes, as typed (``--unit`` is the
    preflight's own; ``--release-pool`` is fix's alone)."""
    import os

    words: List[str] = []
    if options.config is not None:
        words += ["--config", os.path.abspath(options.config)]
    elif ctx.config.source is not None:
        words += ["--config", ctx.config.source]
    checked = {flag.key for flag in SETTING_FLAGS} - {"unit"}
    words += setting_args([(k, v) for k, v in options.settings if k in checked])
    return tuple(words)


def _show(options: Any, asked: Any, fmt: str) -> int:
    """The plan, without changing anything."""
    from strata_doctor.fix.plan import plan_data
    from strata_doctor.fix.plan_text import plan_text

    _, _, _, plan = _plan(options, asked)
    _emit(fmt, plan_text(plan), {"schema": RESULT_SCHEMA, "plan": plan_data(plan), "applied": False})
    if plan.problems:  # --apply would refuse it with 2: a dry run that exits 0 would say it can
        click.echo("strata-doctor: error: cannot apply: " + "; ".join(plan.problems), err=True)
        return 2
    return 0


def _apply(options: Any, asked: Any, fmt: str, wait: bool, yes: bool) -> int:
    """Plan under the lock and carry the plan out; the exit code."""
    from strata_doctor.fix.journal import refuse_unfinished
    from strata_doctor.fix.lock import Lock, drop_state_quietly
    from strata_doctor.fix.steps import ApplyError
    from strata_doctor.root import Root

    try:
        with Lock(Root(options.root), wait=wait) as lock:  # before planning: see the module doc
            refuse_unfinished(lock)
            try:
                root, ctx, before, plan = _plan(options, asked)
            except BaseException:  # a refused config or tree: the lock's folder goes again
                drop_state_quietly(lock)
                raise
            return _apply_locked(root, ctx, before, plan, lock, options, fmt, yes)
    except ApplyError as exc:
        raise UsageFailure(str(exc)) from None


def _apply_locked(root: Any, ctx: Any, before: Sequence[CheckResult], plan: Any, lock: Any,
                  options: Any, fmt: str, yes: bool) -> int:
    """Show and carry out a plan made under ``lock``; the exit code."""
    from strata_doctor.fix.apply import apply_plan
    from strata_doctor.fix.lock import drop_state_quietly
    from strata_doctor.fix.plan import plan_data
    from strata_doctor.fix.plan_text import plan_text
    from strata_doctor.fix.steps import ApplyError

    if plan.problems or plan.empty:
        drop_state_quietly(lock)  # the lock's folder goes again when nothing is recorded
    if plan.problems:
        _emit(fmt, plan_text(plan, applying=True),
              {"schema": RESULT_SCHEMA, "plan": plan_data(plan), "applied": False}, err=True)
        raise UsageFailure("not applied: " + "; ".join(plan.problems))
    if plan.empty:
        _emit(fmt, plan_text(plan, applying=True),
              {"schema": RESULT_SCHEMA, "plan": plan_data(plan), "applied": False})
        return 0
    if fmt == "text":
        echo(plan_text(plan, applying=True))
    if not yes and _interactive() and not click.confirm("Apply these changes?", default=False):
        drop_state_quietly(lock)
        echo("Nothing applied.")
        return 0
    try:
        report = apply_plan(root, plan, lock)
    except ApplyError as exc:
        raise UsageFailure(str(exc)) from None
    return _after(options, ctx, before, report, plan, fmt)


def _interactive() -> bool:
    return sys.stdin.isatty() and sys.stdout.isatty()


def _emit(fmt: str, text: str, data: Dict[str, Any], err: bool = False) -> None:
    if fmt == "json":
        echo(json.dumps(data, indent=2, sort_keys=True))
    else:
        echo(text, nl=False, err=err)


def _after(options: Any, ctx: Any, before: Sequence[CheckResult], report: Any, plan: Any, fmt: str) -> int:
    """Run the checks again on a fresh root (nothing cached) and show before → after."""
    from strata_doctor.context import HostContext
    from strata_doctor.fix.plan import plan_data
    from strata_doctor.output import text as render
    from strata_doctor.root import Root

    fresh = HostContext(Root(ctx.root.base), ctx.config, ctx.gpu_choice)
    after = run_selected(fresh, (), ())
    code = render.exit_code(after, Severity.ERROR)
    rows = transitions(before, after)
    if fmt == "json":
        echo(json.dumps({
            "schema": RESULT_SCHEMA, "plan": plan_data(plan), "applied": True,
            "written": list(report.written), "actions": list(report.actions),
            "skipped_actions": list(report.skipped_actions), "journal": report.journal,
            "transitions": [{"check": c, "before": b, "after": a, "summary": s} for c, b, a, s in rows],
            "exit_code": code,
        }, indent=2, sort_keys=True))
        return code
    from strata_doctor.fix.plan_text import counted

    saved = report.journal.rpartition("/")[0]  # the apply's folder: the originals and their journal
    saved = saved if ctx.root.live else str(ctx.root.path(saved))  # where it is on this machine
    echo(f"Wrote {counted(len(report.written), 'file')}; the originals are saved in {saved}/.")
    for line in report.actions:
        echo(f"  ran: {line}")
    for line in report.skipped_actions:
        echo(f"  not run: {line}")
    echo("")
    echo("Checks, before → after:")
    width = max((len(c) for c, _, _, _ in rows), default=10)
    for check, was, now, summary in rows:
        if was == now:
            echo(f"  {check.ljust(width)}  {was} (unchanged)")
        else:
            echo(f"  {check.ljust(width)}  {was} → {now}: {_without_state(summary, now)}")
    echo("")
    echo(f"{'ready' if code == 0 else 'not ready'} (exit {code}); "
               f"undo with `strata-doctor fix --revert{_root_flag(options)}`")
    return code


def _without_state(summary: str, state: str) -> str:
    """The summary without a lead that repeats the state's finding id: ``info configured:
    configured: ...`` reads ``info configured: ...``."""
    finding = state.rpartition(" ")[2]
    return summary[len(finding) + 2:] if summary.startswith(f"{finding}: ") else summary


def _root_flag(options: Any) -> str:
    return "" if options.root in ("/", "") else f" --root {options.root}"


def transitions(
    before: Sequence[CheckResult], after: Sequence[CheckResult]
) -> List[Tuple[str, str, str, str]]:
    """(check, before, after, after's summary) for every check, in the order they ran."""
    later = {r.check: r for r in after}
    rows: List[Tuple[str, str, str, str]] = []
    for result in before:
        now = later.get(result.check)
        was_text = _state(result)
        now_text = _state(now) if now is not None else "gone"
        worst = _worst(now) if now is not None else None
        summary = worst.summary if worst is not None else ""
        rows.append((result.check, was_text, now_text, summary))
    return rows


def _worst(result: CheckResult) -> Optional[Finding]:
    return max(result.findings, key=lambda f: f.severity, default=None)


def _state(result: CheckResult) -> str:
    if result.crash:
        return "crashed"
    if result.skip:
        return "skipped"
    worst = _worst(result)
    return f"{worst.severity.label} {worst.id}" if worst is not None else "ok"


def _revert(root_path: str, force: bool, fmt: str, wait: bool) -> int:
    from strata_doctor.fix.revert import revert_last
    from strata_doctor.fix.steps import ApplyError
    from strata_doctor.root import Root

    root = Root(root_path)
    try:
        report = revert_last(root, force, wait=wait)
    except ApplyError as exc:
        raise UsageFailure(str(exc)) from None
    if fmt == "json":
        echo(json.dumps({
            "schema": "strata-doctor/fix-revert/v1", "restored": list(report.restored),
            "removed": list(report.removed), "actions": list(report.actions),
            "interrupted": report.interrupted, "nothing": report.nothing,
        }, indent=2, sort_keys=True))
        return 0
    if report.nothing:
        echo("Nothing to revert: no apply is recorded under "
                   f"{root.path('/var/lib/strata-doctor')}.")
        return 0
    if report.interrupted:
        echo("The last apply had not finished; undoing what it did.")
    for path in report.restored:
        echo(f"restored {path}")
    for path in report.removed:
        echo(f"removed  {path}")
    for line in report.actions:
        echo(f"ran: {line}")
    return 0

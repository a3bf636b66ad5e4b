"""``strata-doctor init``: write the engine's settings to /etc/strata-doctor.yaml.

Without ``--apply`` it shows the file it would write, as a diff against the one there, the
way ``fix`` shows its plan; ``--apply`` writes it through fix's one writer, so that
``fix --revert`` puts back what was there, byte for byte; ``--output FILE`` (``-``:
standard output) writes only the YAML. It never asks: a setting nobody gave and the host
does not show stays out of the file, which names it among the defaults.

Exit codes: 0 shown or written; 2 a usage error, or a plan that cannot be applied.
"""

from __future__ import annotations

import os
import sys
from typing import Any, Optional, Tuple

import click

from strata_doctor.cli.options import (
    RELEASE_POOL_FLAG,
    HostOptions,
    UsageFailure,
    a_path,
    host_from_kwargs,
    host_options,
    open_host,
    require_privilege,
    setting_args,
    setting_option,
)


@click.command("init")
@host_options
@setting_option(RELEASE_POOL_FLAG)
@click.option("--apply", "do_apply", is_flag=True,
              help="Write /etc/strata-doctor.yaml under the root (needs root on /).")
@click.option("--output", metavar="FILE", callback=a_path,
              help="Write only the YAML to FILE ('-': standard output), not the plan; the host's "
                   "config is left as it is.")
@click.option("--force", is_flag=True,
              help="Replace a config without the managed-by header (the original is kept for fix --revert).")
@click.option("--wait", is_flag=True,
              help="When a `fix --apply/--revert` holds the lock, wait for it instead of exiting 2.")
def init_command(do_apply: bool, output: Optional[str], force: bool, wait: bool, **kwargs: Any) -> None:
    """Write the engine's settings to /etc/strata-doctor.yaml, each saying where it came from."""
    options = host_from_kwargs(kwargs)
    if do_apply and output is not None:
        raise UsageFailure("--apply and --output exclude each other: --output writes only the YAML")
    if do_apply and options.bundle:
        raise UsageFailure("--bundle replays a report: there is no host tree to change; use --root DIR")
    require_privilege(options.root, do_apply)
    if do_apply:
        sys.exit(_apply(options, force, wait))
    _, plan = _plan(options, force)
    if output is not None:
        _write_output(output, plan.files[0].content)
        return
    click.echo(_plan_words(plan), nl=False)
    if plan.problems:  # as fix's dry run: --apply would refuse it with 2
        click.echo("strata-doctor: error: cannot apply: " + "; ".join(plan.problems), err=True)
        sys.exit(2)


def _plan(options: HostOptions, force: bool) -> Tuple[Any, Any]:
    """(root, the plan of the one file) for the options."""
    from strata_doctor.config import ConfigError, load_settings
    from strata_doctor.fix.config_file import Given, init_plan, written_settings

    root, ctx = open_host(options)
    try:
        _, written = load_settings(root, options.config)
    except ConfigError as exc:  # it changed since open_host read it
        raise UsageFailure(str(exc)) from None
    source = os.path.abspath(options.config) if options.config is not None else ctx.config.source
    flags = tuple((key, value, " ".join(setting_args([(key, value)]))) for key, value in options.settings)
    given = Given(flags, written_settings(written), source)
    return root, init_plan(ctx, given, force)


def _plan_words(plan: Any, applying: bool = False) -> str:
    """The plan as fix words it; a file already as it would be written is one line."""
    from strata_doctor.fix.plan_text import plan_text

    if plan.empty and not plan.problems:
        done = "nothing written" if applying else "nothing to write"
        return f"Nothing to change: {plan.files[0].path} already holds these settings; {done}.\n"
    text = plan_text(plan, applying=applying)
    planned = plan.files[0]
    if planned.blocked and planned.current:  # a config of the operator's: what --force would write
        text += f"\nWith --force, {planned.path} would be replaced so:\n{planned.diff()}"
    return text


def _write_output(path: str, text: str) -> None:
    from strata_doctor.output.files import OutputError, write_text

    try:
        write_text(path, text)
    except OutputError as exc:
        raise UsageFailure(f"--output {exc}") from None


def _apply(options: HostOptions, force: bool, wait: bool) -> int:
    """Plan under the lock and write the one file; the exit code."""
    from strata_doctor.fix.apply import apply_plan
    from strata_doctor.fix.journal import refuse_unfinished
    from strata_doctor.fix.lock import Lock, drop_state_quietly
    from strata_doctor.fix.steps import ApplyError
    from strata_doctor.root import Root

    try:
        with Lock(Root(options.root), wait=wait) as lock:  # planned under it, as fix --apply is
            refuse_unfinished(lock)
            try:
                root, plan = _plan(options, force)
            except BaseException:
                drop_state_quietly(lock)
                raise
            if plan.problems or plan.empty:
                drop_state_quietly(lock)
            if plan.problems:
                click.echo(_plan_words(plan, applying=True), nl=False, err=True)
                raise UsageFailure("not applied: " + "; ".join(plan.problems))
            click.echo(_plan_words(plan, applying=True), nl=False)
            if plan.empty:
                return 0
            report = apply_plan(root, plan, lock)
    except ApplyError as exc:
        raise UsageFailure(str(exc)) from None
    saved = report.journal.rpartition("/")[0]
    saved = saved if root.live else str(root.path(saved))
    where = "" if options.root in ("/", "") else f" --root {options.root}"
    click.echo(f"Wrote {report.written[0]}; the original is saved in {saved}/; "
               f"undo with `strata-doctor fix --revert{where}`.")
    return 0


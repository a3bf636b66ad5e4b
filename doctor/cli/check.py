"""strata-doctor check and list-checks."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any, List, Optional, Tuple

import click

from strata_doctor.cli.options import (
    FAIL_ON,
    UsageFailure,
    a_path,
    host_from_kwargs,
    host_options,
    known_ids,
    open_host,
    run_selected,
    use_color,
)
from strata_doctor.model import CheckResult, Severity

if TYPE_CHECKING:
    from strata_doctor.context import HostContext


@click.command("check")
@click.argument("check_ids", nargs=-1, metavar="[CHECK_ID]...")
@host_options
@click.option("--format", "fmt", type=click.Choice(["text", "json", "prometheus", "nfd"]), default="text",
              show_default=True, help="prometheus: node_exporter textfile; nfd: node-feature-discovery.")
@click.option("--output", metavar="FILE", callback=a_path,
              help="With prometheus or nfd: write FILE atomically ('-': standard output). FILE must "
                   "be a regular file, absent or /dev/null: folders, FIFOs, other devices, sockets "
                   "and symbolic links are refused.")
@click.option("--ignore", multiple=True, metavar="ID",
              help="Downgrade this check's (or CHECK/FINDING's) findings to info; repeatable.")
@click.option("--fail-on", type=FAIL_ON, default="error", show_default=True,
              help="Lowest severity that makes the exit code 1.")
@click.option("-v", "--verbose", is_flag=True, help="Show details and the evidence read.")
@click.option("-q", "--quiet", is_flag=True, help="Print nothing when ready; one line per problem otherwise.")
def check_command(check_ids: Tuple[str, ...], fmt: str, output: Optional[str], ignore: Tuple[str, ...],
                  fail_on: str, verbose: bool, quiet: bool, **kwargs: Any) -> None:
    """Check this host (or a captured one) for the engine; exit 1 when not ready."""
    from strata_doctor.output import text as render

    output = _fleet_output(output, fmt)
    options = host_from_kwargs(kwargs)
    known_ids(ignore, "--ignore")
    _, ctx = open_host(options)
    results = run_selected(ctx, check_ids, ignore)
    threshold = Severity.parse(fail_on)
    code = render.exit_code(results, threshold)
    if fmt in ("prometheus", "nfd"):
        _emit_fleet(fmt, output, ctx, results, code)
    elif fmt == "json":
        from strata_doctor.output import json as render_json

        click.echo(render_json.to_json(ctx, results, code), nl=False)
    elif quiet:
        for line in render.quiet_lines(results, threshold):
            click.echo(line)
    else:
        from strata_doctor.output.sizes import sizes_line

        head = sizes_line(ctx.config)
        click.echo(render.to_text(results, code, render.TextStyle(use_color()), verbose, head), nl=False)
    sys.exit(code)


def _fleet_output(output: Optional[str], fmt: str) -> Optional[str]:
    """The file ``--output`` names, checked before any work (None: standard output)."""
    if not output:
        return None
    if fmt not in ("prometheus", "nfd"):
        raise UsageFailure("--output is for --format prometheus or nfd")
    from strata_doctor.output.files import OutputError, check_path, is_stdout

    try:
        check_path(output)
    except OutputError as exc:
        raise UsageFailure(f"--output {exc}") from None
    return None if is_stdout(output) else output


def _emit_fleet(fmt: str, output: Optional[str], ctx: HostContext, results: List[CheckResult],
                code: int) -> None:
    """A Prometheus textfile or node-feature-discovery labels, on standard output or in a file."""
    from strata_doctor.output import fleet as render_fleet

    if output is None:
        render_fleet.emit(fmt, ctx, results, code, None)
    elif fmt == "prometheus":
        _write_fleet_file(output, render_fleet.to_prometheus(ctx, results, code))
    else:
        _write_fleet_file(output, render_fleet.to_nfd(ctx, results, code))


def _write_fleet_file(path: str, text: str) -> None:
    """Replace ``path`` atomically under doctor/output/files.py's rule; 0644, as the collector may
    run as another user. A path refused or not writable is one line and exit 2."""
    from strata_doctor.output.files import OutputError, write_text

    try:
        write_text(path, text, 0o644)
    except OutputError as exc:
        raise UsageFailure(f"--output {exc}") from None


@click.command("list-checks")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
def list_checks_command(fmt: str) -> None:
    """List the checks with their ids and titles."""
    import json

    from strata_doctor.registry import all_checks

    checks, failed = all_checks()
    if fmt == "json":
        rows = [{"id": c.id, "title": c.title, "findings": list(c.findings), "doc": (c.__doc__ or "").strip()}
                for c in checks]
        click.echo(json.dumps(rows, indent=2))
        return
    width = max(len(c.id) for c in checks)
    for cls in checks:
        click.echo(f"{cls.id.ljust(width)}  {cls.title}")
    for crash in failed:
        click.echo(f"{crash.check.ljust(width)}  (failed to load: {crash.error})", err=True)

"""strata-doctor check and list-checks."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any, List, Optional, Tuple

import click

from strata_doctor.cli.options import (
    FAIL_ON,
    UsageFailure,
    a_path,
    ascii_only,
    checked_output,
    complete_checks,
    complete_ids,
    echo,
    host_from_kwargs,
    host_options,
    known_ids,
    open_host,
    run_selected,
    terminal_width,
    use_color,
)
from strata_doctor.model import CheckResult, Severity

if TYPE_CHECKING:
    from strata_doctor.context import HostContext


@click.command("check")
@click.argument("check_ids", nargs=-1, metavar="[CHECK_ID]...", shell_complete=complete_checks)
@host_options
@click.option("--format", "fmt", type=click.Choice(["text", "json", "prometheus", "nfd"]), default="text",
              show_default=True, help="prometheus: node_exporter textfile; nfd: node-feature-discovery.")
@click.option("--output", metavar="FILE", callback=a_path,
              help="Write the output (any --format) to FILE instead of standard output ('-': "
                   "standard output): a regular file is replaced atomically, a device (/dev/null) or "
                   "a FIFO written through; folders, sockets, block devices and symbolic links are "
                   "refused.")
@click.option("--ignore", multiple=True, metavar="ID", shell_complete=complete_ids,
              help="Downgrade this check's (or CHECK/FINDING's) findings to info; repeatable.")
@click.option("--fail-on", type=FAIL_ON, default="error", show_default=True,
              help="Lowest severity that makes the exit code 1.")
@click.option("-v", "--verbose", is_flag=True, help="Show details and the evidence read.")
@click.option("-q", "--quiet", is_flag=True, help="Print nothing when ready; one line per problem otherwise.")
def check_command(check_ids: Tuple[str, ...], fmt: str, output: Optional[str], ignore: Tuple[str, ...],
                  fail_on: str, verbose: bool, quiet: bool, **kwargs: Any) -> None:
    """Check this host (or a captured one) for the engine; exit 1 when not ready."""
    from strata_doctor.output import text as render

    output = checked_output(output)
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

        _emit(output, render_json.to_json(ctx, results, code), marks=False)
    elif quiet:
        _emit(output, "".join(line + "\n" for line in render.quiet_lines(results, threshold)))
    else:
        from strata_doctor.output.sizes import sizes_line

        # A file gets no escape codes and one line per row; standard output is fitted to its
        # terminal and gets the ASCII marks where it cannot encode the others.
        style = (render.TextStyle(use_color(), terminal_width(), ascii_only()) if output is None
                 else render.TextStyle(False))
        _emit(output, render.to_text(results, code, style, verbose, sizes_line(ctx.config)))
    sys.exit(code)


def _emit(output: Optional[str], text: str, marks: bool = True) -> None:
    """``text`` on standard output, or in the file ``--output`` names; ``marks``: text with the
    marks, which get their ASCII forms on a stream that cannot encode them (JSON is data and
    goes out as it is)."""
    if output is None:
        (echo if marks else click.echo)(text, nl=False)
    else:
        _write_output(output, text, None)



def _emit_fleet(fmt: str, output: Optional[str], ctx: HostContext, results: List[CheckResult],
                code: int) -> None:
    """A Prometheus textfile or node-feature-discovery labels, on standard output or in a file."""
    from strata_doctor.output import fleet as render_fleet

    if output is None:
        render_fleet.emit(fmt, ctx, results, code, None)
    elif fmt == "prometheus":
        _write_output(output, render_fleet.to_prometheus(ctx, results, code), 0o644)
    else:
        _write_output(output, render_fleet.to_nfd(ctx, results, code), 0o644)


def _write_output(path: str, text: str, mode: Optional[int]) -> None:
    """Write ``path`` under doctor/output/files.py's rule (the fleet files 0644, as the collector
    may run as another user). A path refused or not writable is one line and exit 2."""
    from strata_doctor.output.files import OutputError, write_text

    try:
        write_text(path, text, mode)
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

"""``strata-doctor report``: a Markdown (or JSON) bug report, and optionally a bundle.

``report`` takes the same host and engine options as ``check`` except one: here
``--bundle FILE.tar.gz`` *writes* a bundle, where ``check --bundle FILE`` reads one. The
exit code is 0 when the report was written (whatever it found; ``check`` is for gating),
2 on a usage or configuration error.
"""

from __future__ import annotations

import json
import sys
from typing import Any, Callable, Dict, List, Optional, Tuple, TypeVar

import click

from strata_doctor.cli.options import (
    FAIL_ON,
    UsageFailure,
    a_path,
    complete_ids,
    echo,
    host_from_kwargs,
    host_options,
    known_ids,
    open_host,
    run_selected,
)
from strata_doctor.model import Severity

F = TypeVar("F", bound=Callable[..., Any])
MAX_PASSES = 3  # a redaction pass can find a value that changes the summary line once


def report_host_options(func: F) -> F:
    """``check``'s host options without its ``--bundle`` (input), which ``report`` reuses
    for its output archive."""
    func = host_options(func)
    params = getattr(func, "__click_params__", [])
    func.__click_params__ = [p for p in params if p.name != "bundle"]  # type: ignore[attr-defined]
    return func


@click.command("report")
@report_host_options
@click.option("--format", "fmt", type=click.Choice(["markdown", "json"]), default="markdown",
              show_default=True, help="Markdown for an issue tracker, or the same as JSON.")
@click.option("-o", "--output", metavar="FILE", callback=a_path,
              help="Write the report to FILE instead of standard output ('-': standard output). "
                   "FILE must be a regular file, absent or /dev/null: folders, FIFOs, other "
                   "devices, sockets and symbolic links are refused.")
@click.option("--bundle", "bundle_out", metavar="FILE.tar.gz", callback=a_path,
              help="Also write a replayable bundle of everything the checks read "
                   "(replay with: strata-doctor check --bundle FILE.tar.gz); '-' writes it to "
                   "standard output, with the report in --output FILE. Same rules as --output, "
                   "and not the same file.")
@click.option("--no-redact", is_flag=True,
              help="Keep host names, addresses, users and serials (the report says so at the top).")
@click.option("--ignore", multiple=True, metavar="ID", shell_complete=complete_ids,
              help="Downgrade this check's (or CHECK/FINDING's) findings to info; repeatable.")
@click.option("--fail-on", type=FAIL_ON, default="error", show_default=True,
              help="Lowest severity that makes the verdict 'not ready'.")
def report_command(fmt: str, output: Optional[str], bundle_out: Optional[str], no_redact: bool,
                   ignore: Tuple[str, ...], fail_on: str, **kwargs: Any) -> None:
    """Write a bug report of this host (Markdown or JSON), redacted, and optionally a bundle."""
    from strata_doctor.facts.identity import read_identity
    from strata_doctor.output import json as render_json
    from strata_doctor.output import text as render
    from strata_doctor.output.redact import Redactor
    from strata_doctor.output.report import build_report, private_values, protected_words

    kwargs["bundle"] = None
    _check_outputs(output, bundle_out)
    known_ids(ignore, "--ignore")
    root, ctx = open_host(host_from_kwargs(kwargs))
    results = run_selected(ctx, (), ignore)
    code = render.exit_code(results, Severity.parse(fail_on))
    # The check JSON as `check --format json` prints it, before the report reads more facts.
    check_data = render_json.to_json_data(ctx, results, code)
    report = build_report(ctx, results, code)
    redactor = Redactor(enabled=not no_redact)
    if redactor.enabled:
        redactor.protect(protected_words(ctx, results))
        redactor.learn_host(read_identity(root))
        for kind, value in private_values(ctx):
            redactor.add(kind, value)
    bundle_parts = _prepare_bundle(root, ctx, redactor, report) if bundle_out else None
    markdown, data, check = _render(report, check_data, redactor)
    text = markdown if fmt == "markdown" else json.dumps(data, indent=2, sort_keys=True) + "\n"
    if bundle_out and bundle_parts is not None:
        _write_bundle(bundle_out, bundle_parts, redactor, markdown, check)
    _emit(text, output)


def _check_outputs(output: Optional[str], bundle_out: Optional[str]) -> None:
    """Refuse output paths before any work (docs/report.md#output-paths)."""
    from strata_doctor.output.files import OutputError, check_path, same_file

    for option, path in (("--output", output), ("--bundle", bundle_out)):
        if path is None:
            continue
        try:
            check_path(path)
        except OutputError as exc:
            raise UsageFailure(f"{option} {exc}") from None
    if output is not None and bundle_out is not None and same_file(output, bundle_out):
        # The bundle is written first: the report would then replace it.
        raise UsageFailure(f"--output {output}: is the file --bundle names ({bundle_out}); "
                           "give each its own file")
    _bundle_destination(output, bundle_out)


def _bundle_destination(output: Optional[str], bundle_out: Optional[str]) -> None:
    """The bundle is binary: never to a terminal; to standard output only with the report
    in its own file."""
    from strata_doctor.output.files import is_stdout, is_terminal, stdout_is_terminal

    if is_terminal(bundle_out):
        raise UsageFailure(f"--bundle {bundle_out}: is a terminal; the bundle is binary: "
                           "name a file or a pipe")
    if is_stdout(bundle_out):
        if output is None or is_stdout(output):
            raise UsageFailure("--bundle - writes the bundle to standard output: "
                               "give the report its own file with --output FILE")
        if stdout_is_terminal():
            raise UsageFailure("--bundle -: standard output is a terminal; "
                               "redirect it to a file or a pipe")


def _prepare_bundle(root: Any, ctx: Any, redactor: Any, report: Any) -> Tuple[Any, List[Any]]:
    from strata_doctor.output.bundle import capture
    from strata_doctor.output.bundle_write import redact_capture

    captured = capture(root, report.unreadable, report.absent)
    return captured, redact_capture(captured, redactor, ctx.config)


def _render(
    report: Any, check_data: Dict[str, Any], redactor: Any
) -> Tuple[str, Dict[str, Any], Dict[str, Any]]:
    """Markdown, report JSON and check JSON, redacted; rendered again while a pass still
    finds new values, so the redaction summary counts everything it replaced."""
    from strata_doctor.output.report_markdown import render_markdown, report_data

    markdown, data, check = "", {}, {}
    for _ in range(MAX_PASSES):
        before = redactor.counts()
        markdown = redactor.text(render_markdown(report, redactor.summary() if redactor.enabled else None))
        check = redactor.value(check_data)
        data = redactor.value(dict(check_data, report=report_data(report)))
        data["report"]["redaction"] = {"enabled": redactor.enabled, "counts": redactor.counts()}
        if redactor.counts() == before:
            break
    return markdown, data, check


def _write_bundle(path: str, parts: Tuple[Any, List[Any]], redactor: Any, markdown: str,
                  check_data: Dict[str, Any]) -> None:
    from strata_doctor.output.bundle_write import write_bundle
    from strata_doctor.output.provenance import could_not_read

    captured, members = parts
    documents = {
        "report.md": markdown.encode("utf-8"),
        "check.json": (json.dumps(check_data, indent=2, sort_keys=True) + "\n").encode("utf-8"),
    }
    from strata_doctor.output.files import OutputError, is_null, is_stdout, writes_through

    try:
        info = write_bundle(path, captured, members, redactor, documents)
    except OutputError as exc:
        raise UsageFailure(f"--bundle {exc}") from None
    except OSError as exc:
        raise UsageFailure(f"--bundle {path}: cannot write: {exc.strerror or exc}") from None
    where, replay = info.path, info.path
    if is_stdout(path) or writes_through(path):  # no file there to replay: name none
        where = "the bundle to standard output" if is_stdout(path) else f"the bundle to {path}"
        where += " (nothing kept)" if is_null(path) else ""
        replay = "FILE.tar.gz"
    # The report's own count (Report.unreadable), said in the report's words.
    unread = could_not_read(info.unreadable) + (", listed in manifest.json" if info.unreadable else "")
    echo(
        f"strata-doctor: wrote {where} ({info.size / 1024:.1f} KiB, {info.entries:,} entries, {unread}); "
        f"replay with: strata-doctor check --bundle {replay}",
        err=True,
    )


def _emit(text: str, output: Optional[str]) -> None:
    from strata_doctor.output.files import OutputError, is_stdout, write_text

    if output is None or is_stdout(output):
        echo(text, nl=False)
        return
    try:
        write_text(output, text)
    except OutputError as exc:
        raise UsageFailure(f"--output {exc}") from None
    except OSError as exc:
        raise UsageFailure(f"--output {output}: cannot write: {exc.strerror or exc}") from None
    echo(f"strata-doctor: wrote {output}", err=True)


if __name__ == "__main__":  # pragma: no cover
    report_command(sys.argv[1:])

"""The ``strata-doctor`` command line.

Exit codes (docs/exit-codes.md): 0 ready, 1 a finding at or above ``--fail-on``,
2 usage or configuration error, 3 a check crashed.
"""

import importlib
import os
import re
import sys
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Sequence, Tuple, TypeVar, Union

import click

from strata_doctor import __version__
from strata_doctor.model import Severity

F = TypeVar("F", bound=Callable[..., Any])

# Sub-commands live in their own modules and are imported only when used, so that
# ``check`` never pays for the template engine that ``fix`` and ``report`` need.
LAZY_COMMANDS: Dict[str, str] = {
    "check": "strata_doctor.cli:check_command",
    "list-checks": "strata_doctor.cli:list_checks_command",
    "map": "strata_doctor.cli_map:map_command",
    "fix": "strata_doctor.cli_fix:fix_command",
    "report": "strata_doctor.cli_report:report_command",
    "numa-plan": "strata_doctor.cli_numa_plan:numa_plan_command",
    "probe": "strata_doctor.cli_probe:probe_command",
}


class LazyGroup(click.Group):
    """A group whose sub-commands are imported on first use."""

    def list_commands(self, ctx: click.Context) -> List[str]:
        return sorted(LAZY_COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> Optional[click.Command]:
        target = LAZY_COMMANDS.get(cmd_name)
        if target is None:
            return None
        module, _, attr = target.partition(":")
        command = getattr(importlib.import_module(module), attr)
        assert isinstance(command, click.Command)
        return command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The commands, each with the first sentence of its help whole: click cuts it at the
        terminal's width with "..."; here the formatter wraps it instead."""
        rows = []
        for name in self.list_commands(ctx):
            command = self.get_command(ctx, name)
            if command is not None and not command.hidden:
                rows.append((name, command.get_short_help_str(limit=WHOLE)))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


WHOLE = 10_000
"""A ``short_help`` limit no first sentence reaches."""


# Commands that only read the host. After one of these the console script leaves without
# tearing the interpreter down (freeing every module and object costs ~8 ms, a tenth of a
# preflight); commands that write files end the ordinary way.
READ_ONLY_COMMANDS = frozenset({"check", "list-checks", "numa-plan"})


def run() -> None:
    """The ``strata-doctor`` console script: :func:`main`, then a quick exit after the
    commands that only read."""
    for name in ("stdout", "stderr"):
        if getattr(sys, name) is None:  # started with it closed: its output goes nowhere
            setattr(sys, name, open(os.devnull, "w", encoding="utf-8"))  # noqa: SIM115 - kept open to the end
    for stream in (sys.stdout, sys.stderr):
        _fit_encoding(stream)
    command = next((arg for arg in sys.argv[1:] if not arg.startswith("-")), None)
    read_only = command in READ_ONLY_COMMANDS
    if read_only:
        # A short run that makes no reference cycles worth collecting: the collector's
        # passes over a large host's thousands of new objects cost more than they free.
        import gc

        gc.disable()
    code: Union[str, int, None] = 0
    try:
        main(prog_name="strata-doctor")  # standalone mode: it always ends in SystemExit
    except SystemExit as leaving:
        code = leaving.code
    if _pipe_closed():
        _end_on_closed_pipe()
    if read_only and isinstance(code, int) and _alone():
        _leave_now(code)
    sys.exit(code)


def _fit_encoding(stream: Any) -> None:
    """ASCII marks on a stream that cannot encode the symbols (PYTHONIOENCODING=latin-1)."""
    try:
        "✓✗→—".encode(getattr(stream, "encoding", None) or "ascii")
    except (UnicodeEncodeError, LookupError):
        from strata_doctor.output.text import fit_stream

        fit_stream(stream)


def _pipe_closed() -> bool:
    """Standard output (or error) was a pipe whose reader went away: click caught EPIPE and
    wrapped the streams, or the output still buffered cannot be written."""
    # Click 8.5 made the wrapper private (_PacifyFlushWrapper) and deprecates the old name:
    # know it by name on every version rather than import it.
    if any(type(stream).__name__.lstrip("_") == "PacifyFlushWrapper" for stream in (sys.stdout, sys.stderr)):
        return True
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BrokenPipeError:
            return True
        except (OSError, ValueError):  # a full disk or a closed file: the ordinary exit reports it
            pass
    return False


def _end_on_closed_pipe() -> None:
    """End as a program whose output pipe closed does (docs/exit-codes.md): 0 for --help and
    --version, else killed by SIGPIPE (status 141 in a shell), never a verdict's 0, 1 or 2."""
    import atexit
    import contextlib
    import signal

    atexit._run_exitfuncs()  # e.g. removing a replayed bundle's temporary tree
    with contextlib.suppress(OSError, ValueError):
        sys.stderr.flush()
    if any(arg in ("-h", "--help", "--version") for arg in sys.argv[1:]):
        os._exit(0)
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGPIPE)
    os._exit(128 + signal.SIGPIPE)  # pragma: no cover - the signal ends the process first


def _alone() -> bool:
    """No other thread runs (one would be joined at an ordinary exit)."""
    threading = sys.modules.get("threading")
    return threading is None or threading.active_count() == 1


def _leave_now(code: int) -> None:
    """Run exit handlers, flush the output, and end the process without the teardown."""
    import atexit

    atexit._run_exitfuncs()  # e.g. removing a replayed bundle's temporary tree
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError):  # a closed pipe or a full disk: the ordinary exit reports it
        return
    os._exit(code)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="strata-doctor")
def main() -> None:
    """Find what makes this host slow or unstable for the Strata engine, and fix it."""


class HostOptions(NamedTuple):
    """The options every command shares: which host, and what the engine needs."""

    root: str
    config: Optional[str]
    arena: Optional[str]
    kv: Optional[str]
    gpu: Optional[str]
    unit: Optional[str]
    bundle: Optional[str] = None


def _root_dir(ctx: click.Context, param: click.Parameter, value: str) -> str:
    """``--root`` must be a folder: a wrong one is one line naming it, as ``--bundle``'s is."""
    if not os.path.lexists(value):
        raise UsageFailure(f"--root {value}: no such folder")
    if not os.path.isdir(value):
        raise UsageFailure(f"--root {value}: not a folder; a report bundle is replayed with --bundle")
    return value


def host_options(func: F) -> F:
    """Add ``--root``, ``--bundle``, ``--config``, ``--arena``, ``--kv``, ``--gpu``, ``--unit``."""
    options = [
        click.option("--root", default="/", show_default=True, metavar="DIR", callback=_root_dir,
                     help="Read the host from this captured tree instead of /."),
        click.option("--bundle", metavar="FILE",  # a missing FILE is one line: _unpack_bundle
                     help="Replay a host from a report bundle (.tar.gz)."),
        click.option("--config", metavar="FILE",
                     help="Engine config (default: /etc/strata-doctor.yaml under the root)."),
        click.option("--arena", metavar="SIZE", help="Pinned expert arena, e.g. 46.84GiB."),
        click.option("--kv", metavar="SIZE", help="Pinned K/V cache, e.g. 3.09GiB."),
        click.option("--gpu", metavar="ADDRESS", help="Compute GPU's PCI address, e.g. 0000:84:00.0."),
        click.option("--unit", metavar="NAME", help="Engine systemd unit (default strata.service)."),
    ]
    for option in reversed(options):
        func = option(func)
    return func


def host_from_kwargs(kwargs: Dict[str, Any]) -> HostOptions:
    """Pop the shared host options out of a command's keyword arguments."""
    names = ("root", "config", "arena", "kv", "gpu", "unit", "bundle")
    values = {name: kwargs.pop(name) for name in names}
    return HostOptions(**values)


class UsageFailure(click.ClickException):
    """A configuration or usage error: one line, exit 2."""

    exit_code = 2

    def show(self, file: Any = None) -> None:
        click.echo(f"strata-doctor: error: {self.format_message()}", err=True)


def open_host(options: HostOptions) -> Tuple[Any, Any]:
    """Build the Root and HostContext for the options; errors become exit 2."""
    from strata_doctor.config import ConfigError, apply_settings, load_config
    from strata_doctor.context import HostContext
    from strata_doctor.root import Root
    from strata_doctor.rules.gpu import GpuChoiceError

    path = options.root
    if options.bundle and options.root not in ("/", ""):
        raise UsageFailure("--bundle and --root exclude each other: a bundle replays its own host")
    if options.gpu is not None and not PCI_ADDRESS.match(options.gpu.strip()):
        raise UsageFailure(f"--gpu {options.gpu}: not a PCI address (expected e.g. 0000:84:00.0 or 84:00.0)")
    if options.bundle:
        path = _unpack_bundle(options.bundle)
    root = Root(path)
    if not root.live:
        _looks_like_a_host(root, options.bundle or path)
    try:
        config = load_config(root, options.config)
        config = apply_settings(
            config,
            {"arena": options.arena, "kv": options.kv, "unit": options.unit, "gpu": options.gpu},
            "command line",
        )
        ctx = HostContext(root, config)
        known_node(ctx, ctx.config.numa, f"{config.source or 'config'}: numa:")
        if ctx.gpu_choice:
            _ = ctx.placement  # validate --gpu now, as a usage error
    except (ConfigError, GpuChoiceError) as exc:
        raise UsageFailure(str(exc)) from None
    return root, ctx


PCI_ADDRESS = re.compile(r"^(?:[0-9a-fA-F]{4}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$")
"""``0000:84:00.0`` or ``84:00.0``: what ``--gpu`` takes."""


HOST_MARKS = ("/sys/devices/system/node", "/sys/devices/system/cpu", "/proc/meminfo")


def _looks_like_a_host(root: Any, shown: str) -> None:
    """A tree with none of ``sys/devices/system/node``, ``sys/devices/system/cpu`` (a kernel
    without NUMA) and ``proc/meminfo`` is no host (exit 2)."""
    if not any(root.path(p).exists() for p in HOST_MARKS):
        raise UsageFailure(f"does not look like a host: {shown} has none of "
                           f"{', '.join(p.lstrip('/') for p in HOST_MARKS)}")


def known_node(ctx: Any, numa: str, source: str) -> None:
    """A node id the host lacks is a usage error, said as ``numa-plan`` says it."""
    if numa.isdigit() and ctx.numa.node(int(numa)) is None:
        known = ",".join(str(n.id) for n in ctx.numa.nodes) or "none"
        raise UsageFailure(f"{source} {numa}: no such NUMA node on this host (nodes: {known})")


def known_ids(values: Sequence[str], option: str) -> None:
    """Every ``CHECK`` or ``CHECK/FINDING`` of ``--ignore``/``--only``/``--skip`` names a check,
    and a finding that check declares (registry.unknown_id)."""
    from strata_doctor.registry import all_checks, unknown_id

    if not values:
        return
    checks, failed = all_checks()
    for value in values:
        why = unknown_id(value, checks, (c.check for c in failed))
        if why:
            raise UsageFailure(f"{option} {value}: {why}")


def _unpack_bundle(path: str) -> str:
    import tarfile
    import zlib

    from strata_doctor.output.bundle import TOP, unpack  # tarfile and gzip only when replaying a bundle

    if not os.path.lexists(path):
        raise UsageFailure(f"--bundle {path}: no such file")
    if os.path.isdir(path):
        raise UsageFailure(f"--bundle {path}: a folder, not a bundle file; replay an unpacked bundle "
                           f"with --root {os.path.join(path, TOP)}")
    try:
        return str(unpack(path))
    except EOFError:  # click would print "Aborted!" for it (docs/report.md: one line, exit 2)
        raise UsageFailure(f"{path}: not a strata-doctor bundle: it is cut short "
                           "(the compressed data ends early)") from None
    except (OSError, ValueError, zlib.error, tarfile.TarError) as exc:
        raise UsageFailure(f"{path}: not a strata-doctor bundle: {exc}") from None


def use_color(stream: Any = None) -> bool:
    """Colour only on a terminal, never under a non-empty NO_COLOR (https://no-color.org), never on
    TERM=dumb (a terminal that shows escape codes as text: Emacs' shell, some CI logs)."""
    if os.environ.get("NO_COLOR") or os.environ.get("TERM") == "dumb":
        return False
    stream = stream or sys.stdout
    return bool(getattr(stream, "isatty", lambda: False)())


def select_checks(ids: Sequence[str]) -> Tuple[List[Any], List[Any]]:
    """The checks to run (all when ``ids`` is empty); unknown ids are a usage error."""
    from strata_doctor.registry import all_checks

    checks, failed = all_checks()
    if not ids:
        return checks, failed
    known = {c.id: c for c in checks}
    unknown = [i for i in ids if i not in known]
    if unknown:
        raise UsageFailure(f"unknown check {unknown[0]!r} (known: {', '.join(sorted(known))})")
    return [known[i] for i in ids], [c for c in failed if c.check in ids]


def run_selected(ctx: Any, ids: Sequence[str], ignore: Sequence[str]) -> List[Any]:
    """Run the selected checks; plug-ins that failed to load become crashed rows."""
    from strata_doctor.model import CheckResult
    from strata_doctor.registry import run_checks

    checks, failed = select_checks(ids)
    results = run_checks(ctx, checks, ignore)
    results.extend(CheckResult(c.check, c.check, crash=c) for c in failed)
    return results


FAIL_ON = click.Choice(["error", "warning"])


@click.command("check")
@click.argument("check_ids", nargs=-1, metavar="[CHECK_ID]...")
@host_options
@click.option("--format", "fmt", type=click.Choice(["text", "json", "prometheus", "nfd"]), default="text",
              show_default=True, help="prometheus: node_exporter textfile; nfd: node-feature-discovery.")
@click.option("--output", metavar="FILE",
              help="With prometheus or nfd: write FILE atomically ('-': standard output). FILE must "
                   "be a regular file or absent: folders, FIFOs, devices, sockets and symbolic links "
                   "are refused.")
@click.option("--ignore", multiple=True, metavar="ID",
              help="Downgrade this check's (or CHECK/FINDING's) findings to info; repeatable.")
@click.option("--fail-on", type=FAIL_ON, default="error", show_default=True,
              help="Lowest severity that makes the exit code 1.")
@click.option("-v", "--verbose", is_flag=True, help="Show details and the evidence read.")
@click.option("-q", "--quiet", is_flag=True, help="Print nothing when ready; one line per problem otherwise.")
def check_command(check_ids: Tuple[str, ...], fmt: str, output: Optional[str], ignore: Tuple[str, ...],
                  fail_on: str, verbose: bool, quiet: bool, **kwargs: Any) -> None:
    """Check this host (or a captured one) for the engine; exit 1 when not ready."""
    from strata_doctor.output import json as render_json
    from strata_doctor.output import text as render

    if output and fmt not in ("prometheus", "nfd"):
        raise UsageFailure("--output is for --format prometheus or nfd")
    if output:
        from strata_doctor.output.files import OutputError, check_path, is_stdout

        try:
            check_path(output)
        except OutputError as exc:
            raise UsageFailure(f"--output {exc}") from None
        output = None if is_stdout(output) else output
    options = host_from_kwargs(kwargs)
    known_ids(ignore, "--ignore")
    _, ctx = open_host(options)
    results = run_selected(ctx, check_ids, ignore)
    threshold = Severity.parse(fail_on)
    code = render.exit_code(results, threshold)
    if fmt in ("prometheus", "nfd"):
        from strata_doctor.output import fleet as render_fleet

        if output is None:
            render_fleet.emit(fmt, ctx, results, code, None)
        else:
            _write_fleet_file(output, render_fleet.to_prometheus(ctx, results, code) if fmt == "prometheus"
                              else render_fleet.to_nfd(ctx, results, code))
    elif fmt == "json":
        click.echo(render_json.to_json(ctx, results, code), nl=False)
    elif quiet:
        for line in render.quiet_lines(results, threshold):
            click.echo(line)
    else:
        click.echo(render.to_text(results, code, render.TextStyle(use_color()), verbose), nl=False)
    sys.exit(code)


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


if __name__ == "__main__":  # pragma: no cover
    main()

"""The ``strata-doctor`` command line.

Exit codes (docs/exit-codes.md): 0 ready, 1 a finding at or above ``--fail-on``,
2 usage or configuration error, 3 a check crashed.
"""

import contextlib
import importlib
import os
import sys
from typing import Any, Dict, Iterator, List, Optional, Tuple, Union

import click

from strata_doctor import __version__

# Sub-commands live in their own modules and are imported only when used, so that
# ``check`` never pays for the template engine that ``fix`` and ``report`` need.
LAZY_COMMANDS: Dict[str, str] = {
    "check": "strata_doctor.cli.check:check_command",
    "list-checks": "strata_doctor.cli.check:list_checks_command",
    "explain": "strata_doctor.cli.explain:explain_command",
    "map": "strata_doctor.cli.map:map_command",
    "fix": "strata_doctor.cli.fix:fix_command",
    "init": "strata_doctor.cli.init:init_command",
    "report": "strata_doctor.cli.report:report_command",
    "numa-plan": "strata_doctor.cli.numa_plan:numa_plan_command",
    "probe": "strata_doctor.cli.probe:probe_command",
}


class LazyGroup(click.Group):
    """A group whose sub-commands are imported on first use, and whose usage errors (its own
    and every sub-command's) are one line, as docs/exit-codes.md says, not click's usage
    block."""

    def make_context(self, info_name: Optional[str], args: List[str],
                     parent: Optional[click.Context] = None, **extra: Any) -> click.Context:
        with one_line_usage():  # the group's own options: --bogus
            return super().make_context(info_name, args, parent, **extra)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            with one_line_usage():  # the command's name, its options and arguments, its callbacks
                return super().invoke(ctx)
        except KeyboardInterrupt:
            # click says "Aborted!" and exits 1, which a script reads as "not ready": an
            # interrupted run is no verdict, and ends with 130 as a shell reports SIGINT.
            click.echo("strata-doctor: interrupted", err=True)
            sys.exit(130)

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

    def resolve_command(self, ctx: click.Context,
                        args: List[str]) -> Tuple[Optional[str], Optional[click.Command], List[str]]:
        """A misspelt command is refused with the closest name (``chek``: did you mean
        'check'?); click's own refusal names none."""
        name = args[0] if args else ""
        if (not ctx.resilient_parsing and name and not name.startswith("-")
                and self.get_command(ctx, name) is None):
            from strata_doctor.registry import unknown_word

            ctx.fail(unknown_word(f"No such command {name!r}", name, self.list_commands(ctx)))
        return super().resolve_command(ctx, args)

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


@contextlib.contextmanager
def one_line_usage() -> Iterator[None]:
    """Turn click's usage errors (a bad option, value, choice or argument) into the tool's one
    line, exit 2. Bare ``strata-doctor`` still shows the help: that is no error of a value."""
    try:
        yield
    except click.UsageError as exc:
        if type(exc).__name__ == "NoArgsIsHelpError":  # click 8.2+; known by name on every version
            raise
        from strata_doctor.cli.options import UsageFailure

        words = " ".join(exc.format_message().split())  # click's words, on one line
        raise UsageFailure(words[:-1] if words.endswith(".") else words) from None


# Commands that only read the host. After one of these the console script leaves without
# tearing the interpreter down (freeing every module and object costs ~8 ms, a tenth of a
# preflight); commands that write files end the ordinary way.
READ_ONLY_COMMANDS = frozenset({"check", "list-checks", "numa-plan"})


def run() -> None:
    """The ``strata-doctor`` console script: :func:`main`, then a quick exit after the
    commands that only read."""
    _usable_streams()
    command = next((arg for arg in sys.argv[1:] if not arg.startswith("-")), None)
    read_only = command in READ_ONLY_COMMANDS
    if read_only:
        # A short run that makes no reference cycles worth collecting: the collector's
        # passes over a large host's thousands of new objects cost more than they free
        # (docs/performance.md measures both this and the quick exit).
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


def _usable_streams() -> None:
    """Standard output and error that can be written, in an encoding that takes the marks."""
    for name in ("stdout", "stderr"):
        if getattr(sys, name) is None:  # started with it closed: its output goes nowhere
            setattr(sys, name, open(os.devnull, "w", encoding="utf-8"))  # noqa: SIM115 - kept open to the end
    for stream in (sys.stdout, sys.stderr):
        _fit_encoding(stream)


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
    if any(arg in ("-h", "--help", "-V", "--version") for arg in sys.argv[1:]):
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
@click.version_option(__version__, "-V", "--version", prog_name="strata-doctor")
def main() -> None:
    """Find what makes this host slow or unstable for the Strata engine, and fix it."""


if __name__ == "__main__":  # pragma: no cover
    main()

"""What every host command takes: --root, --bundle, the engine's sizes; and how a host is opened."""

import os
import re
from typing import (
    TYPE_CHECKING,
    Any,
    Callable,
    Dict,
    List,
    NamedTuple,
    Optional,
    Sequence,
    Tuple,
    Type,
    TypeVar,
)

import click

# The streams' own rules (colour, encoding, width) are streams.py's; every command imports
# them from here with the rest of what it shares.
from strata_doctor.cli.streams import ascii_only as ascii_only
from strata_doctor.cli.streams import echo as echo
from strata_doctor.cli.streams import stream_encoding as stream_encoding
from strata_doctor.cli.streams import terminal_width as terminal_width
from strata_doctor.cli.streams import use_color as use_color

if TYPE_CHECKING:  # imported where used: --help and usage errors never load the host's layers
    from click.shell_completion import CompletionItem

    from strata_doctor.check import Check
    from strata_doctor.context import HostContext
    from strata_doctor.model import CheckResult, Crash
    from strata_doctor.root import Root

F = TypeVar("F", bound=Callable[..., Any])


class HostOptions(NamedTuple):
    """The options every command shares: which host, and what the engine needs."""

    root: str
    config: Optional[str]
    bundle: Optional[str] = None
    settings: Tuple[Tuple[str, object], ...] = ()
    """(config key, value as given) of each setting flag on the command line, in the
    order of :data:`SETTING_FLAGS`: ``("arena", "46.84GiB")``, ``("lock", True)``."""

    @property
    def gpu(self) -> Optional[str]:
        """``--gpu``, when given."""
        value = dict(self.settings).get("gpu")
        return None if value is None else str(value)


class SettingFlag(NamedTuple):
    """The flag of one config key: the same setting, through the same validation."""

    key: str
    """The config key, and the name of the command's parameter."""
    flag: str
    """The option, e.g. ``--arena``; ``--lock/--no-lock`` for a switch."""
    metavar: str
    """What the help shows for its value ("" for a switch)."""
    help: str
    """Its line in ``--help``."""


SETTING_FLAGS: Tuple[SettingFlag, ...] = (
    SettingFlag("arena", "--arena", "SIZE", "Pinned expert arena, e.g. 46.84GiB (arena:)."),
    SettingFlag("kv", "--kv", "SIZE", "Pinned K/V cache, e.g. 3.09GiB (kv:)."),
    SettingFlag("gpu", "--gpu", "ADDRESS", "Compute GPU's PCI address, e.g. 0000:84:00.0 (gpu:)."),
    SettingFlag("unit", "--unit", "NAME", "Engine systemd unit (unit:; default strata.service)."),
    SettingFlag("workers", "--workers", "N", "CPU expert-pool threads (workers:)."),
    SettingFlag("headroom", "--headroom", "SIZE", "Memory to keep free beside arena + K/V (headroom:; "
                "default 4GiB)."),
    SettingFlag("hugepages", "--hugepages", "auto|hugetlb|thp", "How the engine gets huge pages "
                "(hugepages:; default auto)."),
    SettingFlag("numa", "--numa", "auto|off|N", "Node to bind the engine to: auto = the GPU's node, "
                "off = no binding, N = node N (numa:)."),
    SettingFlag("lock", "--lock/--no-lock", "", "Whether the engine mlock()s arena and K/V (lock:)."),
    SettingFlag("model", "--model", "PATH", "The engine's model (GGUF file or safetensors folder), which "
                "sizes the arena and K/V where they are not given (model:; default: the one on the "
                "engine's command line)."),
    SettingFlag("context", "--context", "TOKENS", "K/V cache length in tokens (context:; default: the "
                "engine's --ctx-size, else the model's own)."),
    SettingFlag("cache_type", "--cache-type", "TYPE", "K/V cache element type (cache_type:): f16 "
                "(default), q8_0, q4_0..."),
)
"""The setting flags every host command takes, one per config key (docs/config.md). A key
that gets a flag gets a row here; ``release_pool`` is :data:`RELEASE_POOL_FLAG`, on ``fix``
and ``init`` only."""


RELEASE_POOL_FLAG = SettingFlag(
    "release_pool", "--release-pool/--no-release-pool", "",
    "Let fix release a hugepage pool other programs may use (release_pool:).")
"""Consent for ``fix`` to act, not a fact of the engine: only the commands that write take it."""


def a_path(ctx: click.Context, param: click.Parameter, value: Optional[str]) -> Optional[str]:
    """A path option's value; an empty one is a usage error (``--bundle ''`` must not mean
    no bundle, and so this host, nor ``--output ''`` standard output)."""
    if value == "":
        name = max(param.opts, key=len)  # --output, not -o
        raise UsageFailure(f"{name} '': an empty path names nothing")
    return value


def _root_dir(ctx: click.Context, param: click.Parameter, value: str) -> str:
    """``--root`` must be a folder: a wrong one is one line naming it, as ``--bundle``'s is."""
    a_path(ctx, param, value)
    if not os.path.lexists(value):
        raise UsageFailure(f"--root {value}: no such folder")
    if not os.path.isdir(value):
        raise UsageFailure(f"--root {value}: not a folder; a report bundle is replayed with --bundle")
    return value


def checked_output(output: Optional[str]) -> Optional[str]:
    """The file ``--output`` names, checked before any work or measuring, so a refused path
    costs nothing (None: standard output); a refusal is one line and exit 2."""
    if not output:
        return None
    from strata_doctor.output.files import OutputError, check_path, is_stdout

    try:
        check_path(output)
    except OutputError as exc:
        raise UsageFailure(f"--output {exc}") from None
    return None if is_stdout(output) else output


def host_options(func: F) -> F:
    """Add ``--root``, ``--bundle``, ``--config`` and the setting flags (:data:`SETTING_FLAGS`)."""
    options = [
        click.option("--root", default="/", show_default=True, metavar="DIR", callback=_root_dir,
                     shell_complete=complete_folders,
                     help="Read the host from this captured tree instead of /."),
        click.option("--bundle", metavar="FILE", callback=a_path,  # a missing FILE: _unpack_bundle
                     shell_complete=complete_files, help="Replay a host from a report bundle (.tar.gz)."),
        click.option("--config", metavar="FILE", callback=a_path, shell_complete=complete_files,
                     help="Engine config (default: /etc/strata-doctor.yaml under the root)."),
        *(setting_option(flag) for flag in SETTING_FLAGS),
    ]
    for option in reversed(options):
        func = option(func)
    return func


def setting_option(flag: SettingFlag) -> Callable[[F], F]:
    """The click option of one setting flag, its value checked as the config key's is."""
    if "/" in flag.flag:  # a switch: --lock/--no-lock, None when neither is given
        return click.option(flag.flag, flag.key, default=None, help=flag.help)
    return click.option(flag.flag, flag.key, default=None, callback=_setting_value,
                        metavar=flag.metavar, help=flag.help)


def _setting_value(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
    """A setting flag's value, refused in the config key's own words when it is bad:
    ``Invalid value for '--arena': '12' has no unit (write e.g. 12GiB or 12MiB)``."""
    if value is None:
        return None
    from strata_doctor.config import convert_setting

    assert param.name is not None
    try:
        convert_setting(param.name, value)
    except ValueError as exc:
        raise click.BadParameter(str(exc), ctx, param) from None
    return value


def host_from_kwargs(kwargs: Dict[str, Any]) -> HostOptions:
    """Pop the shared host options and every setting flag out of a command's keyword arguments."""
    root, config, bundle = (kwargs.pop(name) for name in ("root", "config", "bundle"))
    keys = [f.key for f in (*SETTING_FLAGS, RELEASE_POOL_FLAG) if f.key in kwargs]
    given = ((key, kwargs.pop(key)) for key in keys)
    return HostOptions(root, config, bundle, tuple((k, v) for k, v in given if v is not None))


def flag_of(key: str) -> str:
    """The flag that gives a config key, as typed: ``--arena``, ``--lock`` (``--no-lock``)."""
    found = next((f for f in (*SETTING_FLAGS, RELEASE_POOL_FLAG) if f.key == key), None)
    return found.flag.split("/")[0] if found is not None else f"--{key.replace('_', '-')}"


def setting_args(settings: Sequence[Tuple[str, object]]) -> Tuple[str, ...]:
    """The setting flags given, as words of a command line: ``--arena 46.84GiB``, ``--no-lock``."""
    words: List[str] = []
    for key, value in settings:
        if isinstance(value, bool):
            flag = flag_of(key)
            words.append(flag if value else "--no-" + flag[2:])
        else:
            words.extend((flag_of(key), str(value)))
    return tuple(words)


class UsageFailure(click.ClickException):
    """A configuration or usage error: one line, exit 2."""

    exit_code = 2

    def show(self, file: Any = None) -> None:
        echo(f"strata-doctor: error: {self.format_message()}", err=True)


def require_privilege(root_path: str, changes: bool) -> None:
    """Changing this host (``/``) needs root: exit 2 otherwise (a tree under --root does not)."""
    from pathlib import Path

    if changes and Path(root_path).resolve() == Path("/") and os.geteuid() != 0:
        raise UsageFailure("changing this host (/) needs root: run it with sudo, or write into a tree "
                           "with --root DIR")


def open_host(options: HostOptions) -> Tuple["Root", "HostContext"]:
    """Build the Root and HostContext for the options; errors become exit 2."""
    from strata_doctor.config import ConfigError
    from strata_doctor.rules.gpu import GpuChoiceError

    root = _open_root(options)
    try:
        ctx = _open_context(root, options)
    except (ConfigError, GpuChoiceError) as exc:
        raise UsageFailure(str(exc)) from None
    return root, ctx


def _open_root(options: HostOptions) -> "Root":
    """The host the options name: this one, a captured tree, or an unpacked bundle."""
    from strata_doctor.root import Root

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
    return root


def _open_context(root: "Root", options: HostOptions) -> "HostContext":
    """The host's context under the config and the options over it; a node or GPU the host
    lacks is refused now, as a usage error, rather than in the middle of a check."""
    from strata_doctor.config import apply_settings, load_config
    from strata_doctor.context import HostContext

    config = load_config(root, options.config)
    config = apply_settings(config, dict(options.settings), "command line")
    given = "numa" in dict(options.settings)
    ctx = HostContext(root, config)
    known_node(ctx, ctx.config.numa, "--numa" if given else f"{config.source or 'config'}: numa:")
    if ctx.gpu_choice:
        _ = ctx.placement  # validate --gpu now, as a usage error
    return ctx


PCI_ADDRESS = re.compile(r"^(?:[0-9a-fA-F]{4}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$")
"""``0000:84:00.0`` or ``84:00.0``: what ``--gpu`` takes."""


HOST_MARKS = ("/sys/devices/system/node", "/sys/devices/system/cpu", "/proc/meminfo")


def _looks_like_a_host(root: "Root", shown: str) -> None:
    """A tree with none of ``sys/devices/system/node``, ``sys/devices/system/cpu`` (a kernel
    without NUMA) and ``proc/meminfo`` is no host (exit 2)."""
    # By descriptor, inside the root: a folder nobody may search is no PermissionError.
    if not any(root.look(p, follow_last=True) is not None for p in HOST_MARKS):
        raise UsageFailure(f"does not look like a host: {shown} has none of "
                           f"{', '.join(p.lstrip('/') for p in HOST_MARKS)}")


def known_node(ctx: "HostContext", numa: str, source: str) -> None:
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

    from strata_doctor.output.bundle import TOP
    from strata_doctor.output.bundle_replay import release, unpack  # tarfile and gzip only when replaying

    if not os.path.lexists(path):
        raise UsageFailure(f"--bundle {path}: no such file")
    if os.path.isdir(path):
        raise UsageFailure(f"--bundle {path}: a folder, not a bundle file; replay an unpacked bundle "
                           f"with --root {os.path.join(path, TOP)}")
    context = click.get_current_context(silent=True)
    if context is not None:  # the folder lives as long as the command, refused or not
        context.call_on_close(release)
    try:
        return str(unpack(path, on_signal=True))  # SIGTERM and SIGINT remove it too
    except EOFError:  # click would print "Aborted!" for it (docs/report.md: one line, exit 2)
        raise UsageFailure(f"{path}: not a strata-doctor bundle: it is cut short "
                           "(the compressed data ends early)") from None
    except (OSError, ValueError, zlib.error, tarfile.TarError) as exc:
        raise UsageFailure(f"{path}: not a strata-doctor bundle: {exc}") from None


def select_checks(ids: Sequence[str]) -> Tuple[List[Type["Check"]], List["Crash"]]:
    """The checks to run (all when ``ids`` is empty); unknown ids are a usage error."""
    from strata_doctor.registry import all_checks

    checks, failed = all_checks()
    if not ids:
        return checks, failed
    known = {c.id: c for c in checks}
    unknown = [i for i in ids if i not in known]
    if unknown:
        from strata_doctor.registry import unknown_word

        raise UsageFailure(unknown_word(f"unknown check {unknown[0]!r}", unknown[0], sorted(known)))
    return [known[i] for i in ids], [c for c in failed if c.check in ids]


def run_selected(ctx: "HostContext", ids: Sequence[str], ignore: Sequence[str]) -> List["CheckResult"]:
    """Run the selected checks; plug-ins that failed to load become crashed rows."""
    from strata_doctor.model import CheckResult
    from strata_doctor.registry import run_checks

    checks, failed = select_checks(ids)
    results = run_checks(ctx, checks, ignore)
    results.extend(CheckResult(c.check, c.check, crash=c) for c in failed)
    return results


FAIL_ON = click.Choice(["error", "warning"])


def complete_checks(ctx: click.Context, param: click.Parameter, incomplete: str) -> List[str]:
    """Shell completion of a check id (``check numa-<TAB>``)."""
    from strata_doctor.registry import all_checks

    checks, failed = all_checks()
    ids = [c.id for c in checks] + [c.check for c in failed]
    return [i for i in ids if i.startswith(incomplete)]


def complete_ids(ctx: click.Context, param: click.Parameter, incomplete: str) -> List[str]:
    """Shell completion of ``CHECK`` or ``CHECK/FINDING`` (``--ignore swap/<TAB>``)."""
    from strata_doctor.registry import all_checks

    check, slash, _ = incomplete.partition("/")
    if not slash:
        return complete_checks(ctx, param, incomplete)
    checks, _failed = all_checks()
    findings = next((c.findings for c in checks if c.id == check), ())
    return [f"{check}/{f}" for f in findings if f"{check}/{f}".startswith(incomplete)]


def complete_folders(ctx: click.Context, param: click.Parameter, incomplete: str) -> List["CompletionItem"]:
    """Shell completion of a folder (``--root``): the shell's own, of folders."""
    from click.shell_completion import CompletionItem

    return [CompletionItem(incomplete, type="dir")]


def complete_files(ctx: click.Context, param: click.Parameter, incomplete: str) -> List["CompletionItem"]:
    """Shell completion of a file (``--bundle``, ``--config``): the shell's own, of files."""
    from click.shell_completion import CompletionItem

    return [CompletionItem(incomplete, type="file")]

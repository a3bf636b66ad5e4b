"""What every host command takes: --root, --bundle, the engine's sizes; and how a host is opened."""

import os
import re
import sys
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

if TYPE_CHECKING:  # imported where used: --help and usage errors never load the host's layers
    from strata_doctor.check import Check
    from strata_doctor.context import HostContext
    from strata_doctor.model import CheckResult, Crash
    from strata_doctor.root import Root

F = TypeVar("F", bound=Callable[..., Any])


class HostOptions(NamedTuple):
    """The options every command shares: which host, and what the engine needs."""

    root: str
    config: Optional[str]
    arena: Optional[str]
    kv: Optional[str]
    gpu: Optional[str]
    unit: Optional[str]
    bundle: Optional[str] = None
    model: Optional[str] = None
    context: Optional[str] = None
    cache_type: Optional[str] = None


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


def host_options(func: F) -> F:
    """Add ``--root``, ``--bundle``, ``--config``, ``--arena``, ``--kv``, ``--model``, ``--context``,
    ``--cache-type``, ``--gpu``, ``--unit``."""
    options = [
        click.option("--root", default="/", show_default=True, metavar="DIR", callback=_root_dir,
                     help="Read the host from this captured tree instead of /."),
        click.option("--bundle", metavar="FILE", callback=a_path,  # a missing FILE: _unpack_bundle
                     help="Replay a host from a report bundle (.tar.gz)."),
        click.option("--config", metavar="FILE", callback=a_path,
                     help="Engine config (default: /etc/strata-doctor.yaml under the root)."),
        click.option("--arena", metavar="SIZE", help="Pinned expert arena, e.g. 46.84GiB."),
        click.option("--kv", metavar="SIZE", help="Pinned K/V cache, e.g. 3.09GiB."),
        click.option("--model", metavar="PATH", callback=a_path,
                     help="The engine's model (GGUF file or safetensors folder), which sizes the arena and "
                          "K/V where they are not given (default: the one on the engine's command line)."),
        click.option("--context", metavar="TOKENS", help="K/V cache length in tokens (default: the "
                     "engine's --ctx-size, else the model's own)."),
        click.option("--cache-type", metavar="TYPE",
                     help="K/V cache element type: f16 (default), q8_0, q4_0..."),
        click.option("--gpu", metavar="ADDRESS", help="Compute GPU's PCI address, e.g. 0000:84:00.0."),
        click.option("--unit", metavar="NAME", help="Engine systemd unit (default strata.service)."),
    ]
    for option in reversed(options):
        func = option(func)
    return func


def host_from_kwargs(kwargs: Dict[str, Any]) -> HostOptions:
    """Pop the shared host options out of a command's keyword arguments."""
    names = ("root", "config", "arena", "kv", "gpu", "unit", "bundle", "model", "context", "cache_type")
    values = {name: kwargs.pop(name) for name in names}
    return HostOptions(**values)


class UsageFailure(click.ClickException):
    """A configuration or usage error: one line, exit 2."""

    exit_code = 2

    def show(self, file: Any = None) -> None:
        click.echo(f"strata-doctor: error: {self.format_message()}", err=True)


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
    config = apply_settings(
        config,
        {"arena": options.arena, "kv": options.kv, "unit": options.unit, "gpu": options.gpu,
         "model": options.model, "context": options.context, "cache_type": options.cache_type},
        "command line",
    )
    ctx = HostContext(root, config)
    known_node(ctx, ctx.config.numa, f"{config.source or 'config'}: numa:")
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


def use_color(stream: Any = None) -> bool:
    """Colour only on a terminal, never under a non-empty NO_COLOR (https://no-color.org), never on
    TERM=dumb (a terminal that shows escape codes as text: Emacs' shell, some CI logs)."""
    if os.environ.get("NO_COLOR") or os.environ.get("TERM") == "dumb":
        return False
    stream = stream or sys.stdout
    return bool(getattr(stream, "isatty", lambda: False)())


def select_checks(ids: Sequence[str]) -> Tuple[List[Type["Check"]], List["Crash"]]:
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


def run_selected(ctx: "HostContext", ids: Sequence[str], ignore: Sequence[str]) -> List["CheckResult"]:
    """Run the selected checks; plug-ins that failed to load become crashed rows."""
    from strata_doctor.model import CheckResult
    from strata_doctor.registry import run_checks

    checks, failed = select_checks(ids)
    results = run_checks(ctx, checks, ignore)
    results.extend(CheckResult(c.check, c.check, crash=c) for c in failed)
    return results


FAIL_ON = click.Choice(["error", "warning"])

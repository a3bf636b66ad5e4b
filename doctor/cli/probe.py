"""``strata-doctor probe``: measure this host's NUMA bandwidth and latency matrix.

Live host only: a captured tree (``--root``) or a bundle has no memory to measure.
``--save`` keeps the JSON in ``/var/lib/strata-doctor/probe.json``, where ``check``
finds it (docs/probe.md); whether it can be written there is asked before measuring.
``--output FILE`` writes the output to FILE instead of standard output.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Optional, Tuple

import click

from strata_doctor.cli.options import UsageFailure, a_path, checked_output

if TYPE_CHECKING:  # the probe's modules load only when it runs
    from strata_doctor.facts.probe_result import GpuCopy, ProbeResult
    from strata_doctor.probe.plan import Plan
    from strata_doctor.probe.system import System

SAVE_ROOT = "/"
"""The root ``--save`` writes under: the live host (tests point it at a temporary tree)."""


def _size(ctx: click.Context, param: click.Parameter, value: str) -> int:
    from strata_doctor.facts.parse import parse_size

    try:
        return int(parse_size(value))
    except ValueError as exc:
        raise click.BadParameter(str(exc), ctx, param) from None


@click.command("probe")
@click.option("--root", metavar="DIR", callback=a_path,
              help="Refused: the probe measures the live host only.")
@click.option("--bundle", metavar="FILE", callback=a_path,
              help="Refused: the probe measures the live host only.")
@click.option("--seconds", type=float, default=10.0, show_default=True,
              help="Time of the whole matrix, setting up included (the GPU copy adds up to 2 s).")
@click.option("--size", default="1GiB", show_default=True, callback=_size, metavar="SIZE",
              help="Largest buffer at any time; one per cell, freed before the next.")
@click.option("--threads", type=int, metavar="N",
              help="Reading threads per CPU node (default: all its CPUs).")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
@click.option("--save", is_flag=True, help="Also write the JSON to /var/lib/strata-doctor/probe.json "
              "(asked before measuring: a folder that cannot be written stops it at once).")
@click.option("--output", metavar="FILE", callback=a_path,
              help="Write the output (--format) to FILE instead of standard output, as check "
                   "--output does ('-': standard output; /dev/null and FIFOs are written through).")
@click.option("--gpu", metavar="ADDRESS", help="Compute GPU for the copy bandwidth (default: CUDA device 0).")
@click.option("--no-gpu", is_flag=True, help="Skip the GPU copy bandwidth.")
def probe_command(root: Optional[str], bundle: Optional[str], seconds: float, size: int,
                  threads: Optional[int], fmt: str, save: bool, output: Optional[str], gpu: Optional[str],
                  no_gpu: bool) -> None:
    """Measure read bandwidth and idle latency between every CPU node and memory node."""
    captured = captured_option(root, bundle)
    if captured:
        raise UsageFailure(f"probe measures the live host only; {captured} replays a captured one")
    from strata_doctor.facts.probe_result import to_json
    from strata_doctor.facts.saved_probe import to_text

    output = checked_output(output)
    if save:  # before measuring: a save that cannot happen must not cost the run
        refusal = save_refusal(Path(SAVE_ROOT))
        if refusal:
            raise UsageFailure(refusal)
    system, plan = _planned(size, seconds, threads)
    for note in run_notes(plan.seconds):
        click.echo(f"strata-doctor: warning: {note}", err=True)
    result = _run(system, plan, gpu, no_gpu)
    text = to_json(result)
    _emit(output, text if fmt == "json" else to_text(result))
    if save:  # after the output: a failed save (changed since it was asked) must not lose the figures
        path = save_result(Path(SAVE_ROOT), text)
        click.echo(f"saved {path}", err=True)


def _run(system: System, plan: Plan, gpu: Optional[str], no_gpu: bool) -> ProbeResult:
    """Measure, with a progress line on a terminal; Ctrl-C and refusals said in one line."""
    from strata_doctor.probe.plan import ProbeRefused
    from strata_doctor.probe.system import Unsupported

    progress = _progress_line() if sys.stderr.isatty() else None
    try:
        result = _measured(system, plan, progress, gpu, no_gpu)
    except KeyboardInterrupt:
        _clear(progress)
        click.echo("strata-doctor: probe interrupted; every buffer it took is freed", err=True)
        sys.exit(130)
    except (ProbeRefused, Unsupported, OSError) as exc:
        _clear(progress)
        raise UsageFailure(f"probe failed: {exc}") from None
    _clear(progress)
    return result


def run_notes(seconds: float) -> Tuple[str, ...]:
    """The warning a run shorter than the default gets (the result carries it too)."""
    from strata_doctor.probe.plan import run_notes as notes

    return notes(seconds)



def _emit(output: Optional[str], text: str) -> None:
    """The result on standard output, or in the file ``--output`` names."""
    from strata_doctor.output.files import OutputError, write_text

    if output is None:
        click.echo(text, nl=False)
        return
    try:
        write_text(output, text)
    except OutputError as exc:
        raise UsageFailure(f"--output {exc}") from None


def captured_option(root: Optional[str], bundle: Optional[str]) -> Optional[str]:
    """The option that names a captured host (``--bundle``, or a ``--root`` other than /);
    None on the live host."""
    if bundle:
        return "--bundle"
    if root and os.path.realpath(root) != "/":
        return "--root"
    return None


def _planned(size: int, seconds: float, threads: Optional[int]) -> Tuple[System, Plan]:
    """The live system and the plan of the run; a refusal is a usage error."""
    from strata_doctor.probe.plan import ProbeRefused, make_plan
    from strata_doctor.probe.system import System, Unsupported

    try:
        system = System()
        return system, make_plan(system, size, seconds, threads)
    except (ProbeRefused, Unsupported) as exc:
        raise UsageFailure(str(exc)) from None


def _measured(system: System, plan: Plan, progress: Optional[Callable[[str], None]],
              gpu: Optional[str], no_gpu: bool) -> ProbeResult:
    """The matrix, then the copy bandwidth to ``gpu`` (None: CUDA device 0) unless ``no_gpu``."""
    from strata_doctor.probe import gpu as probe_gpu
    from strata_doctor.probe.measure import Probe

    result = Probe(system, plan, progress).run()
    copies: Tuple[GpuCopy, ...]
    if no_gpu:
        status, reason, copies = "skipped", "--no-gpu", ()
    else:
        if progress:
            progress("GPU copy bandwidth")
        status, reason, copies = probe_gpu.measure(system, plan.cpu_nodes, gpu, min(2.0, plan.seconds / 4))
    return result._replace(gpu_status=status, gpu_reason=reason, gpu=copies)


ELSEWHERE = "run as root, or keep the result with --format json --output FILE"
"""What to do when the save folder cannot be written."""


def save_refusal(root: Path) -> Optional[str]:
    """Why ``--save`` cannot write ``/var/lib/strata-doctor/probe.json`` under ``root``;
    None when it can. Asked before measuring and creating nothing: the nearest folder on
    the way that exists (resolved inside the root, as the save resolves it) must be
    writable and searchable by this process, as the save makes the rest and a temporary
    file there."""
    from strata_doctor.facts.saved_probe import SAVED_PATH
    from strata_doctor.fix.steps import describe
    from strata_doctor.inroot import InRoot

    shown = str(root).rstrip("/") + SAVED_PATH
    try:
        with InRoot(root) as tree:
            existing, _ = tree.locate(os.path.dirname(SAVED_PATH))
            fd = tree.open_dir(existing)
            try:
                allowed = _writable(fd)
            finally:
                os.close(fd)
    except OSError as exc:
        return f"cannot save {shown}: {describe(exc)}{_hint(exc)}"
    if not allowed:
        folder = str(root).rstrip("/") + existing if existing != "/" else str(root)
        return f"cannot save {shown}: {folder}: Permission denied; {ELSEWHERE}"
    return None


def _writable(fd: int) -> bool:
    """The folder open at ``fd`` takes new names from this process (its effective ids)."""
    effective = os.access in os.supports_effective_ids
    return os.access(".", os.W_OK | os.X_OK, dir_fd=fd, effective_ids=effective)


def _hint(exc: OSError) -> str:
    import errno

    return f"; {ELSEWHERE}" if exc.errno in (errno.EACCES, errno.EPERM) else ""


def save_result(root: Path, text: str) -> str:
    """Write the JSON atomically to ``/var/lib/strata-doctor/probe.json`` under ``root``."""
    from strata_doctor.facts.saved_probe import SAVED_PATH
    from strata_doctor.fix.apply import atomic_write
    from strata_doctor.fix.steps import ApplyError, describe, make_folders
    from strata_doctor.inroot import InRoot
    from strata_doctor.root import Root

    shown = str(root).rstrip("/") + SAVED_PATH
    host = Root(root)
    try:
        with InRoot(root) as tree:  # its folders made inside the root, as the writer makes them
            make_folders(tree, os.path.dirname(SAVED_PATH))
        atomic_write(host, SAVED_PATH, text.encode(), 0o644)
    except OSError as exc:  # the link or folder that stopped it named, as the writer names it
        raise UsageFailure(f"cannot save {shown}: {describe(exc)}{_hint(exc)}") from None
    except ApplyError as exc:  # a symlink in its place: never written through
        raise UsageFailure(f"cannot save {shown}: {exc}") from None
    return shown


def _progress_line() -> Any:
    def show(text: str) -> None:
        sys.stderr.write(f"\r\x1b[Kprobe: {text}")
        sys.stderr.flush()
    return show


def _clear(progress: Any) -> None:
    if progress:
        sys.stderr.write("\r\x1b[K")
        sys.stderr.flush()

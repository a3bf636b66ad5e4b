"""Optional part of the probe: pinned host-to-device copy bandwidth from each CPU node.

Only when the CUDA runtime (``libcudart``) loads through ctypes; otherwise the probe
says why it skipped this. For each CPU node a thread pinned to that node, with its
memory policy bound to the node, allocates pinned memory (``cudaHostAlloc``), touches
it, and times ``cudaMemcpy`` host to device into a buffer on the compute GPU. The
pinned pages' node is checked with ``move_pages`` like every other buffer.

Not yet run on a machine with a GPU (docs/probe.md says so): treat its figures with care.
"""

from __future__ import annotations

import contextlib
import ctypes
import threading
from typing import List, Optional, Sequence, Tuple

from strata_doctor.facts.probe_result import GpuCopy
from strata_doctor.probe.system import NodeInfo, System

LIBRARIES = ("libcudart.so", "libcudart.so.12", "libcudart.so.11.0")
COPY_BYTES = 256 << 20
H2D = 1  # cudaMemcpyHostToDevice


def load_cudart() -> Tuple[Optional[ctypes.CDLL], str]:
    """The CUDA runtime, or None and why not."""
    errors = []
    for name in LIBRARIES:
        try:
            return ctypes.CDLL(name), name
        except OSError as exc:
            errors.append(str(exc))
    return None, "libcudart could not be loaded (" + (errors[0] if errors else "not found") + ")"


def measure(system: System, cpu_nodes: Sequence[NodeInfo], gpu: Optional[str],
            seconds: float, size: int = COPY_BYTES,
            cudart: Optional[ctypes.CDLL] = None) -> Tuple[str, str, Tuple[GpuCopy, ...]]:
    """(status, reason, copies): ``measured`` with the GPU named, or ``skipped`` with why."""
    if cudart is None:
        cudart, why = load_cudart()
        if cudart is None:
            return "skipped", why, ()
    count = ctypes.c_int(0)
    if cudart.cudaGetDeviceCount(ctypes.byref(count)) != 0 or count.value < 1:
        return "skipped", "the CUDA runtime loaded but sees no GPU", ()
    device = ctypes.c_int(0)
    if gpu and cudart.cudaDeviceGetByPCIBusId(ctypes.byref(device), gpu.encode()) != 0:
        return "skipped", f"the CUDA runtime does not know the GPU {gpu}", ()
    copies: List[GpuCopy] = []
    errors: List[str] = []
    per_node = max(0.2, seconds / max(1, len(cpu_nodes)))
    for node in cpu_nodes:
        worker = threading.Thread(target=_copy_from, args=(system, cudart, device.value, node, size,
                                                           per_node, copies, errors))
        worker.start()
        worker.join()
        if errors:
            return "skipped", errors[0], ()
    return "measured", f"GPU {gpu or 'device ' + str(device.value)}, {size >> 20} MiB per copy", tuple(copies)


class CudaFailed(Exception):
    """A CUDA runtime call failed; the message names it."""


def _copy_from(system: System, cudart: ctypes.CDLL, device: int, node: NodeInfo, size: int,
               seconds: float, copies: List[GpuCopy], errors: List[str]) -> None:
    """In a thread of its own, pinned and bound to ``node``: the node's copy into ``copies``,
    or why it could not be measured into ``errors``."""
    host = ctypes.c_void_p()
    dev = ctypes.c_void_p()
    try:
        system.pin(node.cpus)
        system.bind_thread(node.id)
        _allocate(system, cudart, device, host, dev, size)
        gbps = _copy_rate(system, cudart, dev, host, size, seconds)
        status = system.page_nodes(int(host.value or 0), size)
        placed = status.count(node.id) / len(status) if len(status) else 0.0
        copies.append(GpuCopy(node.id, gbps, placed))
    except (CudaFailed, OSError) as exc:
        errors.append(str(exc))
    finally:
        _release(system, cudart, dev, host)


def _allocate(system: System, cudart: ctypes.CDLL, device: int, host: ctypes.c_void_p,
              dev: ctypes.c_void_p, size: int) -> None:
    """Pinned memory on the thread's node, touched, and a buffer as large on the GPU."""
    if cudart.cudaSetDevice(device) != 0:
        raise CudaFailed(f"cudaSetDevice({device}) failed")
    if cudart.cudaHostAlloc(ctypes.byref(host), ctypes.c_size_t(size), 0) != 0:
        raise CudaFailed(f"cudaHostAlloc of {size >> 20} MiB failed")
    system.memset(int(host.value or 0), 0, size)
    if cudart.cudaMalloc(ctypes.byref(dev), ctypes.c_size_t(size)) != 0:
        raise CudaFailed(f"cudaMalloc of {size >> 20} MiB failed")


def _copy_rate(system: System, cudart: ctypes.CDLL, dev: ctypes.c_void_p, host: ctypes.c_void_p,
               size: int, seconds: float) -> float:
    """GB/s of host-to-device copies, one after another, for ``seconds`` after a warm-up."""
    cudart.cudaMemcpy(dev, host, ctypes.c_size_t(size), H2D)  # warm-up
    cudart.cudaDeviceSynchronize()
    start = system.clock()
    n = 0
    while True:
        if cudart.cudaMemcpy(dev, host, ctypes.c_size_t(size), H2D) != 0:
            raise CudaFailed("cudaMemcpy failed")
        n += 1
        if system.clock() - start >= seconds:
            break
    cudart.cudaDeviceSynchronize()
    elapsed = system.clock() - start
    return n * size / elapsed / 1e9


def _release(system: System, cudart: ctypes.CDLL, dev: ctypes.c_void_p, host: ctypes.c_void_p) -> None:
    """Free what was allocated and give the thread back the default memory policy."""
    if dev.value:
        cudart.cudaFree(dev)
    if host.value:
        cudart.cudaFreeHost(host)
    with contextlib.suppress(OSError):
        system.bind_thread(None)

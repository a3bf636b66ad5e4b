"""The optional GPU copy measurement against a stand-in CUDA runtime.

No machine of this project has a GPU, so this only proves the calling sequence: a
pinned thread per CPU node binds its memory policy there, allocates pinned memory,
copies it to the device until its time is up, checks where the pages were, and frees
everything; and that a missing runtime or GPU is a reason, not an error.
"""

from __future__ import annotations

import ctypes
from array import array
from typing import Any, Dict, List, Optional

from strata_doctor.probe import gpu as probe_gpu
from tests.test_probe import FakeSystem, two_nodes


class FakeCudart:
    """cudaGetDeviceCount, cudaHostAlloc, cudaMalloc, cudaMemcpy and the frees, in memory."""

    def __init__(self, devices: int = 1) -> None:
        self.devices = devices
        self.buffers: Dict[int, Any] = {}
        self.calls: List[str] = []

    def _alloc(self, ref: Any, size: Any) -> int:
        buf = ctypes.create_string_buffer(size.value)
        ref._obj.value = ctypes.addressof(buf)
        self.buffers[ctypes.addressof(buf)] = buf
        return 0

    def cudaGetDeviceCount(self, ref: Any) -> int:  # the C API's names
        ref._obj.value = self.devices
        return 0 if self.devices else 100

    def cudaDeviceGetByPCIBusId(self, ref: Any, bus: bytes) -> int:
        return 0 if bus == b"0000:84:00.0" else 101

    def cudaSetDevice(self, device: int) -> int:
        self.calls.append(f"set {device}")
        return 0

    def cudaHostAlloc(self, ref: Any, size: Any, flags: int) -> int:
        self.calls.append("hostalloc")
        return self._alloc(ref, size)

    def cudaMalloc(self, ref: Any, size: Any) -> int:
        return self._alloc(ref, size)

    def cudaMemcpy(self, dst: Any, src: Any, size: Any, kind: int) -> int:
        assert kind == probe_gpu.H2D
        ctypes.memmove(dst.value, src.value, size.value)
        return 0

    def cudaDeviceSynchronize(self) -> int:
        return 0

    def cudaFree(self, ptr: Any) -> int:
        self.calls.append("free")
        del self.buffers[ptr.value]
        return 0

    def cudaFreeHost(self, ptr: Any) -> int:
        self.calls.append("freehost")
        del self.buffers[ptr.value]
        return 0


class GpuSystem(FakeSystem):
    def __init__(self) -> None:
        super().__init__(two_nodes())
        self.policies: List[Optional[int]] = []

    def bind_thread(self, node: Optional[int]) -> None:
        self.policies.append(node)

    def page_nodes(self, addr: int, size: int) -> array[int]:
        return array("i", [self.policies[-1] or 0] * (size // self.page_size))


def test_copies_from_every_cpu_node_and_frees_everything() -> None:
    system, cudart = GpuSystem(), FakeCudart()
    status, reason, copies = probe_gpu.measure(system, system.nodes(), "0000:84:00.0", 0.05,
                                               size=4 << 20, cudart=cudart)  # type: ignore[arg-type]
    assert status == "measured" and reason == "GPU 0000:84:00.0, 4 MiB per copy"
    assert [c.cpu_node for c in copies] == [0, 1]
    assert all(c.h2d_gbps > 0 and c.placed_fraction == 1.0 for c in copies)
    assert system.policies == [0, None, 1, None]  # bound while allocating, then reset
    assert system.pinned == [(0, 1), (2, 3)]
    assert cudart.buffers == {} and cudart.calls.count("freehost") == 2


def test_no_gpu_or_unknown_gpu_is_a_reason() -> None:
    system = GpuSystem()
    assert probe_gpu.measure(system, system.nodes(), None, 0.05, cudart=FakeCudart(0))[:2] == (  # type: ignore[arg-type]
        "skipped", "the CUDA runtime loaded but sees no GPU")
    assert probe_gpu.measure(system, system.nodes(), "0000:01:00.0", 0.05, cudart=FakeCudart())[:2] == (  # type: ignore[arg-type]
        "skipped", "the CUDA runtime does not know the GPU 0000:01:00.0")


def test_a_missing_runtime_is_a_reason(monkeypatch: Any) -> None:
    monkeypatch.setattr(probe_gpu, "LIBRARIES", ("libcudart-not-here.so",))
    status, reason, copies = probe_gpu.measure(GpuSystem(), two_nodes(), None, 0.05)
    assert status == "skipped" and reason.startswith("libcudart could not be loaded (") and copies == ()

"""The probe on this machine: its read bandwidth is at least one thread's memchr rate.

This runs the real measuring code on the test's own buffer (64 MiB, bound to the first
node, about 2 s in all); it changes nothing on the host. Other load on a shared machine
makes single figures noisy, so each side is a median of alternating runs, a 10 % margin
is allowed, and a miss is measured again up to twice before it fails.
"""

from __future__ import annotations

import os
import platform

import pytest

from strata_doctor.probe import bandwidth as probe
from strata_doctor.probe.system import SYSCALLS, System

pytestmark = pytest.mark.skipif(
    platform.system() != "Linux" or platform.machine() not in SYSCALLS
    or not os.path.isdir("/sys/devices/system/node"),
    reason="needs Linux with NUMA sysfs on a supported architecture",
)


def test_probe_reads_at_least_as_fast_as_one_memchr_thread() -> None:
    system = System()
    attempts = []
    for _ in range(3):
        result = probe.yardstick(system, 64 << 20, 0.15, rounds=3)
        attempts.append(result)
        assert result.placed_fraction >= 0.99
        if result.probe_gbps >= 0.9 * result.single_gbps:
            return
    pytest.fail("probe slower than one memchr thread: " + "; ".join(
        f"{a.probe_gbps:.1f} GB/s ({a.threads} threads) vs {a.single_gbps:.1f}" for a in attempts))

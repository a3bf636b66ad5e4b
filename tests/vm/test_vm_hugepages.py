"""The seed's hugepage trap, reproduced on a real kernel, reported with the kernel's numbers."""

from __future__ import annotations

import math
import re
from typing import Any, Dict, List

import pytest
from scenarios import (
    ORPHAN,
    TRAP_ARENA_MIB,
    TRAP_HEADROOM_MIB,
    TRAP_HELD,
    TRAP_KV_MIB,
    TRAP_ORPHAN,
    TRAP_POOL,
)
from vmharness import Guests

pytestmark = [pytest.mark.vm, pytest.mark.topology("seed")]

PAGE = 2 * 1024 * 1024
MIB = 1024 * 1024


def meminfo(guests: Guests) -> Dict[str, int]:
    """/proc/meminfo as the kernel wrote it right after the trap was set."""
    guests.get("seed").step("trap-setup")  # fails with the step's output if the setup failed
    text = guests.get("seed").file("meminfo-trap.txt").read_text()
    return {m.group(1): int(m.group(2)) for m in re.finditer(r"^(\w+):\s+(\d+)", text, re.M)}


def trap_findings(guests: Guests) -> List[Dict[str, Any]]:
    data = guests.get("seed").step("check-trap").json()
    assert isinstance(data, dict)
    return [f for f in data["findings"] if f["check"] == "hugepages"]


def test_the_trap_was_set(guests: Guests) -> None:
    setup = guests.get("seed").step("trap-setup")
    assert setup.rc == 0, setup.describe()
    mi = meminfo(guests)
    assert mi["HugePages_Total"] == TRAP_POOL
    assert mi["HugePages_Free"] == TRAP_POOL - TRAP_HELD - TRAP_ORPHAN


def test_trap_reported_with_the_kernels_numbers(guests: Guests) -> None:
    mi = meminfo(guests)
    total, free = mi["HugePages_Total"], mi["HugePages_Free"]
    need = math.ceil(TRAP_ARENA_MIB * 1024 * 1024 / (mi["Hugepagesize"] * 1024))
    assert free < need <= total, "the scenario must be the seed's: less free than needed"
    trap = [f for f in trap_findings(guests) if f["id"] == "trap"]
    assert trap, [(f["id"], f["summary"]) for f in trap_findings(guests)]
    f = trap[0]
    assert f["severity"] == "error"
    assert f"pool {total}" in f["summary"]
    assert f"free {free}" in f["summary"]
    assert f"needed {need}" in f["summary"]
    meminfo_evidence = [e["value"] for e in f["evidence"] if e["source"] == "/proc/meminfo"]
    assert meminfo_evidence and f"HugePages_Total={total}" in meminfo_evidence[0]
    assert f"HugePages_Free={free}" in meminfo_evidence[0]


def test_the_guests_own_numbers_make_it_the_trap(guests: Guests) -> None:
    """An error because the pool runs the start short, not because the pool is too small:
    with the kernel's MemAvailable the fallback leaves less than the headroom, and the
    pool's free pages given back would leave more (docs/checks/hugepages.md)."""
    mi = meminfo(guests)
    available = mi["MemAvailable"] * 1024
    need = (TRAP_ARENA_MIB + TRAP_KV_MIB) * MIB
    headroom = TRAP_HEADROOM_MIB * MIB
    freed = mi["HugePages_Free"] * mi["Hugepagesize"] * 1024
    assert available - need < headroom <= available + freed - need, (available, freed)
    trap = next(f for f in trap_findings(guests) if f["id"] == "trap")
    assert "short of the headroom because of the pool" in trap["detail"]


def test_the_holder_is_named(guests: Guests) -> None:
    data = guests.get("seed").step("check-trap").json()
    assert isinstance(data, dict)
    holders = data["facts"]["hugepages"]["holders"]
    assert [h["bytes"] for h in holders] == [TRAP_HELD * PAGE], holders
    trap = next(f for f in trap_findings(guests) if f["id"] == "trap")
    assert f"pid {holders[0]['pid']}: {TRAP_HELD}" in trap["detail"]
    assert f"orphaned hugetlbfs files: {TRAP_ORPHAN}" in trap["detail"]


def test_orphaned_hugetlbfs_file_is_found(guests: Guests) -> None:
    data = guests.get("seed").step("check-trap").json()
    assert isinstance(data, dict)
    files = [f for m in data["facts"]["hugepages"]["hugetlbfs"] for f in m["files"]]
    orphan = [f for f in files if f["path"] == ORPHAN]
    assert orphan, files
    assert orphan[0]["size_bytes"] == TRAP_ORPHAN * PAGE
    assert orphan[0]["mapped_by"] == []
    found = [f for f in trap_findings(guests) if f["id"] == "orphans"]
    assert found and ORPHAN in found[0]["summary"]
    assert f"{TRAP_ORPHAN} pages" in found[0]["summary"]


def test_fix_sets_the_pool_to_zero_now(guests: Guests) -> None:
    result = guests.get("seed")
    apply = result.step("apply")
    assert apply.rc == 0, apply.describe()
    assert "vm.nr_hugepages = 0" in result.step("dropins-after-apply").stdout
    after = result.step("check-after-apply").json()
    assert isinstance(after, dict)
    ids = {f["id"] for f in after["findings"] if f["check"] == "hugepages"}
    assert "trap" not in ids, ids

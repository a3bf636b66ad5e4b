"""The kernel release read for the ISA the kernel gives: numbers of any length are data,
never a crash (Python refuses int() of more than 4300 digits)."""

from __future__ import annotations

from pathlib import Path

from strata_doctor.facts.cpu import read_kernel_isa
from strata_doctor.root import Root
from tests.conftest import write_tree


def _release(tmp_path: Path, text: str) -> Root:
    return Root(str(write_tree(tmp_path / "host", {"/proc/sys/kernel/osrelease": text})))


def test_a_huge_major_number_is_an_unknown_version(tmp_path: Path) -> None:
    kernel = read_kernel_isa(_release(tmp_path, "9" * 5000 + ".1.0\n"))
    assert kernel.version is None and not kernel.before(5, 16)


def test_a_huge_rhel_build_number_is_not_a_backport(tmp_path: Path) -> None:
    kernel = read_kernel_isa(_release(tmp_path, "5.14.0-" + "9" * 5000 + ".el9.x86_64\n"))
    assert kernel.version == (5, 14) and not kernel.amx_backported


def test_an_ordinary_release(tmp_path: Path) -> None:
    kernel = read_kernel_isa(_release(tmp_path, "5.14.0-284.11.1.el9_2.x86_64\n"))
    assert kernel.version == (5, 14) and kernel.amx_backported

"""Fixtures for the real-kernel tests: one guest boot per topology, shared by its tests.

Each topology boots at most once per session (the first test that needs it pays for
it).  The guest console, QEMU's command line, every step's output and the files the
steps left in ``$OUT`` stay in ``tests/vm/artifacts/<topology>/`` (or under
``$STRATA_VM_ARTIFACTS``); a failing test's report names that folder.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path
from typing import Dict, Iterator

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from guest import BootResult, Image, boot, build_image, find_image  # noqa: E402
from scenarios import payload_for  # noqa: E402
from topologies import TOPOLOGIES  # noqa: E402

BOOT_TIMEOUT = float(os.environ.get("STRATA_VM_BOOT_TIMEOUT", "900"))


def artifacts_root() -> Path:
    return Path(os.environ.get("STRATA_VM_ARTIFACTS") or HERE / "artifacts")


def _skip_reason() -> str:
    if sys.platform != "linux":
        return "the vm tests need Linux"
    if not shutil.which("qemu-system-x86_64"):
        return "qemu-system-x86_64 is not installed (apt-get install qemu-system-x86)"
    if find_image() is None and not shutil.which("debootstrap"):
        return "no cached guest image and no debootstrap to build one"
    return ""


@pytest.fixture(scope="session")
def guest_image() -> Image:
    reason = _skip_reason()
    if reason:
        pytest.skip(reason)
    return build_image()


class Guests:
    """Boots each topology once, on first use."""

    def __init__(self, image: Image) -> None:
        self.image = image
        self.results: Dict[str, BootResult] = {}

    def get(self, name: str) -> BootResult:
        if name not in self.results:
            topology = TOPOLOGIES[name]
            artifacts = artifacts_root() / name
            if artifacts.exists():
                shutil.rmtree(artifacts)
            self.results[name] = boot(
                topology, payload_for(topology), artifacts, self.image, timeout=BOOT_TIMEOUT
            )
        result = self.results[name]
        if result.error:
            pytest.fail(f"{name} guest: {result.error}; console: {result.artifacts}/console.log",
                        pytrace=False)
        return result


@pytest.fixture(scope="session")
def guests(guest_image: Image) -> Iterator[Guests]:
    g = Guests(guest_image)
    yield g
    for name, result in g.results.items():
        print(f"\n{name} guest: {result.wall_seconds:.0f} s; artifacts {result.artifacts}")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    if report.when == "call" and report.failed:
        names = [m.args[0] for m in item.iter_markers("topology") if m.args]
        callspec = getattr(item, "callspec", None)
        if callspec is not None and callspec.params.get("name") in TOPOLOGIES:
            names.append(callspec.params["name"])
        for name in names or sorted(TOPOLOGIES):
            folder = artifacts_root() / name
            if folder.exists():
                report.sections.append(
                    ("vm artifacts", f"{name}: {folder} (console.log, steps/, out/files/)")
                )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "topology(name): the guest topology a vm test reads")

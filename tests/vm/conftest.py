"""Fixtures for the real-kernel tests: one guest boot per topology, shared by its tests.

Each topology boots at most once per session (the first test that needs it pays for
it).  The guest console, QEMU's command line, every step's output and the files the
steps left in ``$OUT`` stay in ``tests/vm/artifacts/<topology>/`` (or under
``$STRATA_VM_ARTIFACTS``); a failing test's report names that folder.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Iterator

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from guest import Image, build_image  # noqa: E402
from topologies import TOPOLOGIES  # noqa: E402
from vmharness import Guests, artifacts_root, skip_reason  # noqa: E402


@pytest.fixture(scope="session")
def guest_image() -> Image:
    reason = skip_reason()
    if reason:
        pytest.skip(reason)
    return build_image()


@pytest.fixture(scope="session")
def guests(guest_image: Image) -> Iterator[Guests]:
    g = Guests(guest_image)
    yield g
    for name, result in g.results.items():
        print(f"\n{name} guest: {result.wall_seconds:.0f} s; artifacts {result.artifacts}")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
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

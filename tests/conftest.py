"""Shared test helpers: small host trees and an in-process CLI runner."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, Iterator, List, Optional, Union

import pytest
from click.testing import CliRunner, Result
from hypothesis import settings

from strata_doctor.cli import main

if TYPE_CHECKING:
    from strata_doctor.config import EngineConfig
    from strata_doctor.model import Finding
    from strata_doctor.registry import Check
    from tests.corpus import Corpus

REPO = Path(__file__).resolve().parent.parent
UPDATE_GOLDEN = os.environ.get("STRATA_UPDATE_GOLDEN") == "1"
HOSTS = REPO / "tests" / "fixtures" / "hosts"
SHARED = REPO.parent / "shared"

# No example database: it would be a folder in the clone (.hypothesis/) that every xdist
# worker writes at once, and that a run as root would leave root-owned. Each run draws fresh.
settings.register_profile("strata-doctor", database=None)
settings.load_profile("strata-doctor")


def copy_host(host: Union[str, Path], dest: Path) -> Path:
    """A copy at ``dest`` of a host tree to write into, its links kept as links: a fixture
    host by name (the test skips when tests/fixtures/hosts lacks it), or any tree."""
    source = HOSTS / host if isinstance(host, str) else host
    if not source.is_dir():
        pytest.skip(f"{source.relative_to(REPO) if source.is_relative_to(REPO) else source} is missing")
    shutil.copytree(source, dest, symlinks=True)
    return dest


def seed_copy(tmp_path: Path) -> Path:
    """A copy of the seed-box fixture at ``tmp_path/tree``."""
    return copy_host("seed-box", tmp_path / "tree")


def write_tree(base: Path, files: Dict[str, str]) -> Path:
    """Write ``{host path: content}`` under ``base``; a value starting '->' is a symlink."""
    for host_path, content in files.items():
        target = base / host_path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        if content.startswith("->"):
            os.symlink(content[2:], target)
        else:
            target.write_text(content)
    return base


def two_node_files(gpu_node: int = 1, unit_show: Optional[str] = None) -> Dict[str, str]:
    """A small two-socket host: 4 CPUs per node, 16 GiB per node, distances 10/21, one GPU."""
    node = "/sys/devices/system/node"
    files = {
        f"{node}/node0/cpulist": "0-3\n",
        f"{node}/node1/cpulist": "4-7\n",
        f"{node}/node0/distance": "10 21\n",
        f"{node}/node1/distance": "21 10\n",
        f"{node}/node0/meminfo": "Node 0 MemTotal:       16777216 kB\nNode 0 MemFree:        8388608 kB\n",
        f"{node}/node1/meminfo": "Node 1 MemTotal:       16777216 kB\nNode 1 MemFree:        8388608 kB\n",
        "/sys/devices/system/cpu/online": "0-7\n",
        "/sys/devices/pci0000:80/0000:80:01.0/0000:81:00.0/class": "0x030000\n",
        "/sys/devices/pci0000:80/0000:80:01.0/0000:81:00.0/vendor": "0x10de\n",
        "/sys/devices/pci0000:80/0000:80:01.0/0000:81:00.0/device": "0x1b06\n",
        "/sys/devices/pci0000:80/0000:80:01.0/0000:81:00.0/numa_node": f"{gpu_node}\n",
        "/sys/devices/pci0000:80/0000:80:01.0/0000:81:00.0/local_cpulist":
            ("4-7" if gpu_node == 1 else "0-3") + "\n",
        "/sys/bus/pci/devices/0000:81:00.0": "->../../../devices/pci0000:80/0000:80:01.0/0000:81:00.0",
        "/proc/cpuinfo": "".join(
            f"processor\t: {c}\nmodel name\t: Test CPU\nphysical id\t: {c // 4}\n"
            f"core id\t\t: {c % 4}\nflags\t\t: fpu avx avx2\n\n"
            for c in range(8)
        ),
        "/proc/meminfo": "MemTotal:       33554432 kB\nMemFree:        16777216 kB\n",
    }
    if unit_show is not None:
        files["/.strata-doctor/commands/systemctl-show-strata.service.txt"] = unit_show
    return files


UNBOUND_UNIT = (
    "Id=strata.service\nLoadState=loaded\nActiveState=active\nMainPID=0\n"
    "NUMAPolicy=\nNUMAMask=\nCPUAffinity=\nAllowedCPUs=\n"
)


@pytest.fixture(params=["openat2", "walk"])
def resolver(request: pytest.FixtureRequest) -> Iterator[str]:
    """Each test twice: resolving with openat2(RESOLVE_IN_ROOT) where this kernel has it,
    and with the portable component-by-component walk forced (docs/fix.md#safety)."""
    from strata_doctor import inroot

    inroot.use_openat2(request.param == "openat2")
    if request.param == "openat2" and not inroot.openat2_available():
        inroot.use_openat2(True)
        pytest.skip("this kernel has no openat2")
    yield request.param
    inroot.use_openat2(True)


@pytest.fixture
def two_node_host(tmp_path: Path) -> Path:
    """A two-node host with the GPU on node 1 and an unbound, loaded engine unit."""
    return write_tree(tmp_path / "host", two_node_files(unit_show=UNBOUND_UNIT))


def run_cli(args: List[str], env: Optional[Dict[str, str]] = None) -> Result:
    """Run strata-doctor in-process with stdout and stderr kept apart."""
    try:
        runner = CliRunner(mix_stderr=False)  # type: ignore[call-arg]
    except TypeError:  # click 8.2+ always keeps them apart
        runner = CliRunner()
    return runner.invoke(main, args, env=env, catch_exceptions=False)


def usage_error(args: List[str]) -> str:
    """The one line a usage error prints (exit 2, ``strata-doctor: error: ...``)."""
    result = run_cli(args)
    assert result.exit_code == 2, (result.exit_code, result.stdout, result.stderr)
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("strata-doctor: error: "), result.stderr
    return lines[0]


def check_json(root: Path, *args: str) -> Dict[str, Any]:
    """``check --format json`` of a tree, parsed; exit 0 or 1 (ready or not), never 2."""
    result = run_cli(["check", "--root", str(root), "--format", "json", *args])
    assert result.exit_code in (0, 1), result.stderr
    data: Dict[str, Any] = json.loads(result.stdout)
    return data


def findings_of(data: Dict[str, Any], check_id: str) -> Dict[str, Dict[str, Any]]:
    """One check's findings in ``check --format json`` output, by finding id."""
    return {f["id"]: f for f in data["findings"] if f["check"] == check_id}


def run_check(check: Check, root: Path, config: EngineConfig) -> List[Finding]:
    """One check run in-process on a tree; it must apply there."""
    from strata_doctor.context import HostContext
    from strata_doctor.root import Root

    ctx = HostContext(Root(str(root)), config)
    reason = check.applies(ctx)
    assert reason is None, reason
    return list(check.run(ctx))


def compare_golden(path: Path, actual: str) -> None:
    """Compare with a golden file; ``STRATA_UPDATE_GOLDEN=1`` rewrites it for review."""
    if UPDATE_GOLDEN or not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(actual)
        if not UPDATE_GOLDEN:
            pytest.fail(f"{path} did not exist; written now, review and commit it")
    assert actual == path.read_text(), f"{path} differs; rerun with STRATA_UPDATE_GOLDEN=1"


PREFLIGHT_SCRIPT = "/usr/local/bin/strata-doctor"
"""What golden files show for the script ``fix --preflight`` names (see preflight_script)."""


@pytest.fixture(scope="session")
def preflight_script_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An executable stand-in for the installed console script, on this machine."""
    script = tmp_path_factory.mktemp("bin") / "strata-doctor"
    script.write_text("#!/bin/sh\nexit 0\n")
    script.chmod(0o755)
    return script


@pytest.fixture(autouse=True)
def preflight_script(preflight_script_file: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``fix --preflight`` names the stand-in, so no test depends on how this machine installed it."""
    monkeypatch.setenv("STRATA_DOCTOR_SCRIPT", str(preflight_script_file))
    return preflight_script_file


@pytest.fixture(scope="session")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Corpus]:
    """The real host snapshots of ../shared/corpus, unpacked once; skips when absent."""
    from tests.corpus import open_corpus

    base = tmp_path_factory.mktemp("corpus")
    yield open_corpus(base)
    shutil.rmtree(base, ignore_errors=True)  # ~220 MiB: do not leave it for pytest's retention


# -- the last line of a run: how many tests read real hardware ----------------------------------
HARDWARE_MARKERS = {
    "corpus": ("corpus test", "corpus tests"),
    "lstopo": ("lstopo comparison", "lstopo comparisons"),
}
"""marker -> how the summary names one test, and several, that carry it."""


def hardware_absent(marker: str) -> Optional[str]:
    """Why the tests of ``marker`` cannot run on this machine; None when they can."""
    if marker == "corpus":
        corpus_dir = SHARED / "corpus"
        if not (corpus_dir / "MANIFEST.md").is_file():
            return f"{corpus_dir} is absent (the real host snapshots; see README.md)"
    elif shutil.which("lstopo-no-graphics") is None:
        return "lstopo-no-graphics is not installed (apt install hwloc-nox)"
    return None


class HardwareTally:
    """Counts, per marker, the tests seen and the tests whose body ran (passed or failed).
    Under pytest-xdist the controller sees every worker's reports, keywords included."""

    def __init__(self) -> None:
        self.seen: Dict[str, int] = dict.fromkeys(HARDWARE_MARKERS, 0)
        self.ran: Dict[str, int] = dict.fromkeys(HARDWARE_MARKERS, 0)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        for marker in HARDWARE_MARKERS:
            if marker not in report.keywords:
                continue
            if report.when == "setup":
                self.seen[marker] += 1
            # A test that skips in its body reports a skipped call; an xfail ran and failed.
            if report.when == "call" and (not report.skipped or hasattr(report, "wasxfail")):
                self.ran[marker] += 1

    def line(self) -> Optional[str]:
        """``real hardware: 268 corpus tests ran, 34 lstopo comparisons ran``, each count
        that is 0 with the reason; None when the run held no such test."""
        if not any(self.seen.values()):
            return None
        parts = []
        for marker, words in HARDWARE_MARKERS.items():
            count = self.ran[marker]
            part = f"{count:,} {words[0] if count == 1 else words[1]} ran"
            why = hardware_absent(marker) if count == 0 else None
            parts.append(f"{part}: {why}" if why else part)
        return "real hardware: " + ", ".join(parts)


def pytest_configure(config: pytest.Config) -> None:
    if not hasattr(config, "workerinput"):  # an xdist worker reports to the controller
        config.pluginmanager.register(HardwareTally(), "strata-hardware-tally")


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_sessionfinish(session: pytest.Session) -> Iterator[None]:
    """After pytest's own summary (so it is the last line), the tally of real-hardware tests."""
    yield
    tally = session.config.pluginmanager.get_plugin("strata-hardware-tally")
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    text = tally.line() if isinstance(tally, HardwareTally) else None
    if text and reporter is not None and not session.config.option.collectonly:
        reporter.write_line(text, bold=True)

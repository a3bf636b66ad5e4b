"""memlock on trees that show no systemd: systemd's default is quoted only where something in
the tree shows systemd (systemctl, the unit's files, /run/systemd/system, PID 1's name);
elsewhere the limit is unknown, and the finding names the files that would show it."""

from pathlib import Path
from typing import Dict

import pytest

from strata_doctor.checks.memlock import Memlock
from strata_doctor.config import EngineConfig
from strata_doctor.facts.systemd_seen import is_systemd_name, read_systemd_seen
from strata_doctor.model import Severity
from strata_doctor.root import Root
from tests.conftest import HOSTS, run_check, two_node_files, write_tree

GIB = 1024**3
CONFIG = EngineConfig(arena_bytes=40 * GIB, kv_bytes=2 * GIB, headroom_bytes=4 * GIB)
LIMITS = ("Limit                     Soft Limit           Hard Limit           Units     \n"
          "Max locked memory         {0:<20} {0:<20} bytes     \n")


def _sparse(tmp_path: Path, extra: Dict[str, str]) -> Path:
    """Sysfs and /proc/meminfo, no command output: a capture without systemctl."""
    files = two_node_files(unit_show=None)
    files["/proc/meminfo"] = "MemTotal:       33554432 kB\nMemFree:        16777216 kB\n"
    files.update(extra)
    return write_tree(tmp_path / "host", files)


def test_is_systemd_name_reads_comm_as_the_kernel_writes_it() -> None:
    assert is_systemd_name("systemd\n")
    assert not is_systemd_name("init\n") and not is_systemd_name("systemd-journal\n")
    assert not is_systemd_name(None) and not is_systemd_name("")


@pytest.mark.parametrize("extra, shown_by", [
    ({}, ""),
    ({"/run/systemd/system/.keep": ""}, "/run/systemd/system"),
    ({"/proc/1/comm": "systemd\n"}, "/proc/1/comm"),
    ({"/proc/1/comm": "tini\n"}, ""),
    ({"/proc/1/status": "Name:\tsystemd\nPid:\t1\nPPid:\t0\n"}, "/proc/1/status"),
])
def test_what_in_the_tree_shows_systemd(tmp_path: Path, extra: Dict[str, str], shown_by: str) -> None:
    root = Root(str(_sparse(tmp_path, extra)))
    assert read_systemd_seen(root, False, ()).shown_by == shown_by
    assert read_systemd_seen(root, True, ()).shown_by == "systemctl"
    unit = "/etc/systemd/system/strata.service"
    assert read_systemd_seen(root, False, (unit,)).shown_by == unit


def test_without_systemd_the_limit_is_unknown_and_not_systemds_default(tmp_path: Path) -> None:
    found = run_check(Memlock(), _sparse(tmp_path, {}), CONFIG)
    assert [f.id for f in found] == ["not-charged"] and found[0].severity is Severity.OK
    summary = found[0].summary
    assert "systemd's default" not in summary and "8.00 MiB" not in summary and "None" not in summary
    assert "the engine may lock an amount the tree does not show" in summary
    assert "/proc/PID/limits" in summary and "/etc/security/limits.conf" in summary
    assert ("/run/systemd/system", "missing (no systemctl output, unit file or systemd as PID 1 either)") \
        in [(e.source, e.value) for e in found[0].evidence]


def test_lock_true_without_systemd_warns_that_the_limit_is_unknown(tmp_path: Path) -> None:
    found = run_check(Memlock(), _sparse(tmp_path, {}), CONFIG._replace(lock=True))
    assert [f.id for f in found] == ["unknown-limit"]
    f = found[0]
    assert f.severity is Severity.WARNING
    assert f.summary.startswith("the config says `lock: true`, so the limit must hold arena + K/V "
                                "(42.00 GiB), but the engine may lock an amount the tree does not "
                                "show: it has no systemd and no /proc/PID/limits of a running engine")
    # no systemd to write a drop-in for: the advice is the shell's or the container's ulimit
    assert f.fix is not None and not f.fix.files and "ulimit -l unlimited" in f.fix.manual[0].text


@pytest.mark.parametrize("extra", [
    {"/run/systemd/system/.keep": ""},
    {"/proc/1/comm": "systemd\n"},
    {"/etc/systemd/system/strata.service": "[Service]\nExecStart=/opt/strata/run\n"},
])
def test_where_the_tree_shows_systemd_its_default_is_quoted(tmp_path: Path, extra: Dict[str, str]) -> None:
    found = run_check(Memlock(), _sparse(tmp_path, extra), CONFIG._replace(lock=True))
    assert [f.id for f in found] == ["too-low"]
    assert "may lock 8.00 MiB" in found[0].summary
    assert ("strata.service (no LimitMEMLOCK=)", "systemd's default DefaultLimitMEMLOCK=8M") in \
        [(e.source, e.value) for e in found[0].evidence]


def test_a_running_engines_own_limit_needs_no_systemd(tmp_path: Path) -> None:
    root = _sparse(tmp_path, {
        "/proc/4242/status": "Name:\tstrata\nPid:\t4242\nVmLck:\t       0 kB\nVmPin:\t       0 kB\n",
        "/proc/4242/cmdline": "/opt/strata/bin/strata\0serve\0",
        "/proc/4242/limits": LIMITS.format("unlimited"),
    })
    found = run_check(Memlock(), root, CONFIG._replace(lock=True))
    assert [f.id for f in found] == ["ok"] and "unlimited" in found[0].summary


@pytest.mark.parametrize("host", ["percpu-cpufreq", "small-no-gpu", "cpu-links-only"])
def test_sparse_fixture_hosts_quote_no_systemd_default(host: str) -> None:
    found = run_check(Memlock(), HOSTS / host, CONFIG)
    assert "systemd's default" not in found[0].summary
    assert "the engine may lock an amount the tree does not show" in found[0].summary

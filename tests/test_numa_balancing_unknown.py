"""numa-balancing when /proc/sys/kernel/numa_balancing is absent: unknown, with what the
kernel would set at boot, never "off"; and the parsers of the kernel config, the release and
the command line that say so, on strings."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Dict, List, Optional

import pytest

from strata_doctor.config import load_config
from strata_doctor.context import HostContext
from strata_doctor.facts.cpu_policy import (
    cmdline_value,
    gunzip_text,
    parse_kernel_config,
    parse_release,
    read_numa_balancing,
)
from strata_doctor.model import Finding, Severity
from strata_doctor.registry import builtin_checks, run_checks
from strata_doctor.root import Root
from tests.conftest import HOSTS, run_cli, two_node_files, write_tree

RELEASE = "3.10.0-514.el7.x86_64"
KEYS = ("CONFIG_NUMA_BALANCING", "CONFIG_NUMA_BALANCING_DEFAULT_ENABLED")
CONFIG_ON = "CONFIG_NUMA=y\nCONFIG_NUMA_BALANCING=y\nCONFIG_NUMA_BALANCING_DEFAULT_ENABLED=y\n"


# -- parsers -----------------------------------------------------------------------------------
def test_kernel_config_values_and_not_set_lines() -> None:
    text = ("# Automatically generated file; DO NOT EDIT.\nCONFIG_NUMA_BALANCING=y\n"
            "# CONFIG_NUMA_BALANCING_DEFAULT_ENABLED is not set\nCONFIG_NUMA=m\n")
    assert parse_kernel_config(text, KEYS) == {KEYS[0]: True, KEYS[1]: False}
    assert parse_kernel_config("CONFIG_NUMA=m\n", ["CONFIG_NUMA"]) == {"CONFIG_NUMA": True}
    assert parse_kernel_config("CONFIG_NUMA=y\n", KEYS) == {}


@pytest.mark.parametrize("text, expected", [
    (RELEASE, (3, 10)), ("6.1.0-27-amd64", (6, 1)), ("2.6.32-754.el6.x86_64", (2, 6)),
    ("4.19.0+", (4, 19)), ("6", None), ("", None), ("linux-6.1", None),
])
def test_release_numbers(text: str, expected: Optional[tuple]) -> None:
    assert parse_release(text) == expected


def test_cmdline_value_is_the_last_word() -> None:
    line = "BOOT_IMAGE=/vmlinuz ro numa_balancing=enable quiet numa_balancing=disable\n"
    assert cmdline_value(line, "numa_balancing") == "disable"
    assert cmdline_value("ro quiet numa=off\n", "numa_balancing") is None


def test_gunzip_text() -> None:
    assert gunzip_text(gzip.compress(CONFIG_ON.encode())) == CONFIG_ON
    assert gunzip_text(b"not gzip") is None and gunzip_text(b"") is None


# -- the fact -----------------------------------------------------------------------------------
def test_default_is_read_only_when_the_file_is_missing(tmp_path: Path) -> None:
    files = {"/proc/sys/kernel/osrelease": f"{RELEASE}\n", f"/boot/config-{RELEASE}": CONFIG_ON,
             "/proc/cmdline": "ro numa_balancing=disable\n"}
    missing = read_numa_balancing(Root(str(write_tree(tmp_path / "a", files))))
    assert missing.mode is None and missing.unread == "missing" and missing.default is not None
    assert missing.default.release == RELEASE and missing.default.version == (3, 10)
    assert missing.default.config == f"/boot/config-{RELEASE}"
    assert missing.default.built and missing.default.enabled
    assert missing.default.cmdline == "disable"
    present = read_numa_balancing(Root(str(write_tree(tmp_path / "b", {
        **files, "/proc/sys/kernel/numa_balancing": "0\n"}))))
    assert present.mode == 0 and present.default is None


def test_proc_config_gz_when_boot_has_no_config(tmp_path: Path) -> None:
    base = write_tree(tmp_path, {"/proc/sys/kernel/osrelease": f"{RELEASE}\n"})
    (base / "proc/config.gz").write_bytes(gzip.compress(
        b"CONFIG_NUMA_BALANCING=y\n# CONFIG_NUMA_BALANCING_DEFAULT_ENABLED is not set\n"))
    default = read_numa_balancing(Root(str(base))).default
    assert default is not None and default.config == "/proc/config.gz"
    assert default.built is True and default.enabled is False


def test_a_config_without_the_key_has_no_balancing(tmp_path: Path) -> None:
    files = {"/proc/sys/kernel/osrelease": "6.1.0-27-arm64\n",
             "/boot/config-6.1.0-27-arm64": "CONFIG_SMP=y\n"}
    default = read_numa_balancing(Root(str(write_tree(tmp_path, files)))).default
    assert default is not None and default.built is False


# -- the check -----------------------------------------------------------------------------------
def balancing(tmp_path: Path, extra: Dict[str, str]) -> Finding:
    root = Root(str(write_tree(tmp_path, {**two_node_files(), **extra})))
    ctx = HostContext(root, load_config(root, None))
    (result,) = run_checks(ctx, [c for c in builtin_checks() if c.id == "numa-balancing"])
    assert result.crash is None, result.crash
    (finding,) = result.findings
    assert "None" not in finding.summary + finding.detail + "".join(e.value for e in finding.evidence)
    return finding


ABSENT = ("/proc/sys/kernel/numa_balancing is absent from the capture, so whether automatic NUMA "
          "balancing is on is unknown; ")
NOT_SET = "CONFIG_NUMA_BALANCING=y\n# CONFIG_NUMA_BALANCING_DEFAULT_ENABLED is not set\n"


@pytest.mark.parametrize("extra, words", [
    ({}, "the capture has neither /proc/sys/kernel/osrelease nor a kernel config to tell whether it is "
         "built in"),
    ({"/proc/sys/kernel/osrelease": f"{RELEASE}\n"},
     f"kernel {RELEASE} comes after Linux 3.8, which brought it, and Debian, Ubuntu, Fedora and RHEL 7 or "
     "later kernels turn it on by default with two nodes or more (this host has 2); neither "
     f"/boot/config-{RELEASE} nor /proc/config.gz is in the capture to tell"),
    ({"/proc/sys/kernel/osrelease": f"{RELEASE}\n", f"/boot/config-{RELEASE}": CONFIG_ON},
     f"kernel {RELEASE} has it (/boot/config-{RELEASE}: CONFIG_NUMA_BALANCING_DEFAULT_ENABLED=y), so it "
     "is on at boot on these 2 nodes"),
    ({"/proc/sys/kernel/osrelease": f"{RELEASE}\n",
      f"/boot/config-{RELEASE}": NOT_SET},
     f"kernel {RELEASE} has it (/boot/config-{RELEASE}: CONFIG_NUMA_BALANCING_DEFAULT_ENABLED is not set), "
     "so it is off at boot on these 2 nodes"),
    ({"/proc/sys/kernel/osrelease": f"{RELEASE}\n", "/proc/cmdline": "ro numa_balancing=disable\n"},
     "numa_balancing=disable on /proc/cmdline turns it off at boot"),
])
def test_a_missing_file_is_unknown_with_what_boot_would_set(tmp_path: Path, extra: Dict[str, str],
                                                           words: str) -> None:
    finding = balancing(tmp_path, extra)
    assert (finding.id, finding.severity) == ("unknown", Severity.INFO)
    assert finding.summary == ABSENT + words
    assert finding.evidence[0].source == "/proc/sys/kernel/numa_balancing"


def test_proc_config_gz_without_a_release_never_says_none(tmp_path: Path) -> None:
    base = write_tree(tmp_path, two_node_files())
    (base / "proc/config.gz").write_bytes(gzip.compress(CONFIG_ON.encode()))
    root = Root(str(base))
    (result,) = run_checks(HostContext(root, load_config(root, None)),
                           [c for c in builtin_checks() if c.id == "numa-balancing"])
    (finding,) = result.findings
    assert finding.summary == ABSENT + ("the running kernel has it (/proc/config.gz: "
                                        "CONFIG_NUMA_BALANCING_DEFAULT_ENABLED=y), so it is on at boot "
                                        "on these 2 nodes")
    (base / "proc/config.gz").write_bytes(gzip.compress(b"# CONFIG_NUMA_BALANCING is not set\n"))
    root = Root(str(base))
    (result,) = run_checks(HostContext(root, load_config(root, None)),
                           [c for c in builtin_checks() if c.id == "numa-balancing"])
    (finding,) = result.findings
    assert finding.summary == ("/proc/sys/kernel/numa_balancing is absent: the running kernel has no "
                               "automatic NUMA balancing (CONFIG_NUMA_BALANCING is not set in "
                               "/proc/config.gz)")


def test_a_sysctl_file_that_sets_it_is_named(tmp_path: Path) -> None:
    finding = balancing(tmp_path, {"/proc/sys/kernel/osrelease": f"{RELEASE}\n",
                                   "/etc/sysctl.d/90-numa.conf": "kernel.numa_balancing = 0\n"})
    assert finding.id == "unknown"
    assert finding.summary.endswith("; /etc/sysctl.d/90-numa.conf sets 0 after boot")


@pytest.mark.parametrize("extra, why", [
    ({"/proc/sys/kernel/osrelease": "3.2.0-4-amd64\n"}, "it came with Linux 3.8"),
    ({"/proc/sys/kernel/osrelease": f"{RELEASE}\n",
      f"/boot/config-{RELEASE}": "CONFIG_NUMA=y\n# CONFIG_NUMA_BALANCING is not set\n"},
     f"CONFIG_NUMA_BALANCING is not set in /boot/config-{RELEASE}"),
])
def test_a_kernel_without_the_feature_is_unsupported(tmp_path: Path, extra: Dict[str, str], why: str) -> None:
    finding = balancing(tmp_path, extra)
    assert (finding.id, finding.severity) == ("unsupported", Severity.OK)
    release = extra["/proc/sys/kernel/osrelease"].strip()
    assert finding.summary == (f"/proc/sys/kernel/numa_balancing is absent: kernel {release} has no "
                               f"automatic NUMA balancing ({why})")


def test_a_file_that_is_there_is_still_read_as_before(tmp_path: Path) -> None:
    finding = balancing(tmp_path, {"/proc/sys/kernel/numa_balancing": "0\n"})
    assert (finding.id, finding.severity) == ("off", Severity.OK)


def test_percpu_cpufreq_host_is_unknown_never_off() -> None:
    result = run_cli(["check", "--root", str(HOSTS / "percpu-cpufreq"), "--format", "json"])
    found: List[Dict[str, object]] = [f for f in json.loads(result.stdout)["findings"]
                                      if f["check"] == "numa-balancing"]
    (finding,) = found
    assert (finding["id"], finding["severity"]) == ("unknown", "info")
    assert f"kernel {RELEASE} comes after Linux 3.8" in str(finding["summary"])
    assert "RHEL 7" in str(finding["summary"])

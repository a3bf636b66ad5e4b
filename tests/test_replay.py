"""A bundle replays exactly what its host showed (docs/report.md, "Replay").

For every fixture host, every real snapshot in ../shared/corpus and a few layouts built
here from copies (Debian's sysctl.conf link, settings given on the command line, sysfs
without ``cpu/online``): ``report --root R --bundle B``, then

- ``check --bundle B --format json`` equals ``check --root R --format json``, apart from
  :data:`RUN_FIELDS`, with the same exit code (unredacted bundles);
- ``check --bundle B`` equals the ``check.json`` the bundle holds, which is the host's
  check JSON redacted (redacted bundles: the default);
- ``fix --bundle B`` prints the plan ``fix --root R`` prints, with the same exit code.
"""

from __future__ import annotations

import json
import tarfile
from pathlib import Path
from typing import Any, Dict, List, Tuple

import pytest

from strata_doctor.output.bundle import TOP
from tests.conftest import HOSTS, copy_host, run_cli, two_node_files, write_tree
from tests.corpus import SNAPSHOTS, Corpus

FIXTURE_HOSTS = sorted(p.name for p in HOSTS.iterdir() if p.is_dir()) if HOSTS.is_dir() else []
ONE_MIB = 2**20
RUN_FIELDS = ("version",)
"""Top-level check JSON fields about the run itself rather than the host: the version of
strata-doctor that ran (a replay with a newer release differs there and only there)."""

DEBIAN_SYSCTL_CONF = (
    "#\n# /etc/sysctl.conf - Configuration file for setting system variables\n"
    "# See /etc/sysctl.d/ for additional system variables.\n"
    "# See sysctl.conf (5) for information.\n#\n\n#kernel.domainname = example.com\n\n"
    "# Uncomment the following to stop low-level messages on console\n#kernel.printk = 3 4 1 3\n\n"
    "# The Strata arena, in 2 MiB pages\nvm.nr_hugepages = 24000\n"
)


def check(*args: str) -> Tuple[Dict[str, Any], int]:
    """``check --format json``: the data without the run's own fields, and the exit code."""
    result = run_cli(["check", *args, "--format", "json"])
    assert result.exit_code in (0, 1), result.stderr
    data: Dict[str, Any] = json.loads(result.stdout)
    for name in RUN_FIELDS:
        data.pop(name, None)
    return data, result.exit_code


def fix(*args: str) -> Tuple[str, int]:
    """``fix``: the plan text and the exit code."""
    result = run_cli(["fix", *args])
    assert "Traceback" not in result.stdout + result.stderr
    return result.stdout, result.exit_code


def saved_check(bundle: Path) -> Dict[str, Any]:
    """The check JSON the bundle holds, without the run's own fields."""
    with tarfile.open(bundle) as tar:
        handle = tar.extractfile(f"{TOP}/check.json")
        assert handle is not None
        data: Dict[str, Any] = json.loads(handle.read())
    for name in RUN_FIELDS:
        data.pop(name, None)
    return data


def assert_replays(root: Path, tmp_path: Path, *options: str) -> Dict[str, Any]:
    """The round trip of the module docstring on one host; returns the host's check data."""
    host, code = check("--root", str(root), *options)
    plan, plan_code = fix("--root", str(root), *options)
    plain = tmp_path / "plain.tar.gz"
    written = run_cli(["report", "--root", str(root), "--bundle", str(plain), "--no-redact", *options])
    assert written.exit_code == 0, written.stderr
    assert plain.stat().st_size < ONE_MIB
    assert check("--bundle", str(plain)) == (host, code)
    assert fix("--bundle", str(plain)) == (plan, plan_code)

    redacted = tmp_path / "redacted.tar.gz"
    written = run_cli(["report", "--root", str(root), "--bundle", str(redacted), *options])
    assert written.exit_code == 0, written.stderr
    replayed, replayed_code = check("--bundle", str(redacted))
    assert replayed == saved_check(redacted)
    assert replayed_code == code
    assert _verdicts(replayed) == _verdicts(host)
    redacted_plan, redacted_code = fix("--bundle", str(redacted))
    assert redacted_code == plan_code and redacted_plan.count("\n") == plan.count("\n")
    return host


def _verdicts(data: Dict[str, Any]) -> List[Tuple[str, str, str]]:
    return [(f["check"], f["id"], f["severity"]) for f in data["findings"]]


def _evidence(data: Dict[str, Any], check_id: str) -> List[Tuple[str, str]]:
    return [(e["source"], e["value"]) for f in data["findings"] if f["check"] == check_id
            for e in f["evidence"]]


# -- every fixture host and every real snapshot ------------------------------------
@pytest.mark.parametrize("host", FIXTURE_HOSTS)
def test_fixture_host_replays(host: str, tmp_path: Path) -> None:
    assert_replays(HOSTS / host, tmp_path)


@pytest.mark.corpus
@pytest.mark.parametrize("name", SNAPSHOTS)
def test_snapshot_replays(corpus: Corpus, name: str, tmp_path: Path) -> None:
    # With the seed's sizes given on the command line, as the corpus tests run them: the
    # arena-fit and hugepage paths run too, and their evidence names "command line".
    assert_replays(corpus.root(name), tmp_path, "--arena", "46.84GiB", "--kv", "3.09GiB")


# -- layouts built here -------------------------------------------------------------
def _copy(host: str, tmp_path: Path) -> Path:
    return copy_host(host, tmp_path / host)


def test_debian_sysctl_link_replays_what_sysctl_conf_holds(tmp_path: Path) -> None:
    # Debian and Ubuntu ship /etc/sysctl.d/99-sysctl.conf -> ../sysctl.conf.
    root = _copy("seed-box", tmp_path)
    (root / "etc/sysctl.d/80-strata-hugepages.conf").unlink()
    (root / "etc/sysctl.conf").write_text(DEBIAN_SYSCTL_CONF)
    (root / "etc/sysctl.d/99-sysctl.conf").symlink_to("../sysctl.conf")
    host = assert_replays(root, tmp_path)
    assert ("/etc/sysctl.conf", "vm.nr_hugepages = 24000") in _evidence(host, "hugepages")
    plan, _ = fix("--root", str(root))
    assert "Remove `vm.nr_hugepages = 24000` from /etc/sysctl.conf" in plan

    bundle = tmp_path / "redacted.tar.gz"
    with tarfile.open(bundle) as tar:
        link = tar.getmember(f"{TOP}/etc/sysctl.d/99-sysctl.conf")
        handle = tar.extractfile(f"{TOP}/etc/sysctl.conf")
        assert handle is not None
        assert link.issym() and link.linkname == "../sysctl.conf"
        assert handle.read() == DEBIAN_SYSCTL_CONF.encode()
        manifest = json.loads(tar.extractfile(f"{TOP}/manifest.json").read())  # type: ignore[union-attr]
    assert not [row for row in manifest["unreadable"] if "sysctl.conf" in row["what"]]


@pytest.mark.parametrize("options", [
    ("--arena", "46.84GiB", "--kv", "3.09GiB"),  # no config file: "command line"
    ("--config", "{config}"),  # a config file outside the root
])
def test_settings_keep_their_source_in_the_replay(options: Tuple[str, ...], tmp_path: Path) -> None:
    root = _copy("seed-box", tmp_path)
    config = root / "etc/strata-doctor.yaml"
    outside = tmp_path / "engine.yaml"
    outside.write_text(config.read_text())
    config.unlink()
    given = tuple(o.format(config=outside) for o in options)
    host = assert_replays(root, tmp_path, *given)
    expected = "command line" if "--arena" in given else str(outside)
    assert (expected, "arena=46.84 GiB hugepages=auto") in _evidence(host, "hugepages")


def test_the_default_config_keeps_its_name(tmp_path: Path) -> None:
    host = assert_replays(HOSTS / "seed-box", tmp_path, "--arena", "40GiB")
    assert ("/etc/strata-doctor.yaml", "arena=40.00 GiB hugepages=auto") in _evidence(host, "hugepages")


def test_listed_names_are_kept_where_nothing_below_was_read(tmp_path: Path) -> None:
    # An old sysfs without cpu/online: the cpuN folders are the only list of CPUs, and
    # nothing is read below them.
    files = {k: v for k, v in two_node_files().items()
             if not k.startswith("/sys/devices/system/node/") and k != "/sys/devices/system/cpu/online"}
    for cpu in range(8):
        files[f"/sys/devices/system/cpu/cpu{cpu}/.keep"] = ""
    files["/sys/devices/system/cpu/cpuidle/.keep"] = ""
    root = write_tree(tmp_path / "h", files)
    host = assert_replays(root, tmp_path)
    assert host["facts"]["numa"]["online_cpus"] == "0-7"
    with tarfile.open(tmp_path / "redacted.tar.gz") as tar:
        names = set(tar.getnames())
    assert f"{TOP}/sys/devices/system/cpu/cpu7" in names
    assert f"{TOP}/sys/devices/system/cpu/cpu7/.keep" not in names  # a name, not its contents

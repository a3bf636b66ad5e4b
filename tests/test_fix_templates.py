"""The templates: headers, reproducibility, and the formats their readers expect.

Units and drop-ins go through ``systemd-analyze verify`` when it can run here, the
wrapper through ``bash -n``, the sysctl file through a sysctl.d(5) reader.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from importlib.resources import files
from pathlib import Path
from typing import Any, Dict, List, Tuple

import pytest

from strata_doctor.fix.plan_files import MANAGED_MARKER, render_template
from tests.conftest import run_cli
from tests.test_fix_hosts import make_host

CONTEXTS: Dict[str, Dict[str, Any]] = {
    "sysctl.conf.j2": {"settings": [("vm.nr_hugepages", 0, "pool of 24,000 pages the engine cannot use")],
                       "finding": "hugepages/trap"},
    "numa-dropin.conf.j2": {"unit": "strata.service", "numa_policy": "preferred", "numa_mask": "1",
                            "cpus": "22-43,66-87", "allowed_cpus": True},
    "numactl-exec-dropin.conf.j2": {"unit": "strata.service", "why": "old systemd", "cpus": "4-7",
                                    "wrapper": "/usr/local/bin/strata-numa", "exec_start": "/bin/true"},
    "strata-numa.j2": {"path": "/usr/local/bin/strata-numa", "mem_option": "preferred", "mem_nodes": "1",
                       "cpu_nodes": "1"},
    "oomd-dropin.conf.j2": {"unit": "strata.service", "finding": "oomd/exposed"},
    "strata.slice.j2": {"unit": "strata.service", "nodes": "1", "cpus": "22-43,66-87"},
    "reserve-dropin.conf.j2": {"unit": "system.slice", "section": "Slice", "cpus": "0-21,44-65",
                               "reserved": "22-43,66-87"},
    "slice-dropin.conf.j2": {"unit": "strata.service"},
    "memlock-dropin.conf.j2": {"unit": "strata.service", "needed": "49.93 GiB",
                               "current": "8.00 MiB (8388608)"},
    "swap-dropin.conf.j2": {"unit": "strata.service"},
    "preflight-dropin.conf.j2": {"unit": "strata.service",
                                 "command": "strata-doctor check --quiet --fail-on error"},
    "strata-doctor.yaml.j2": {"written_by": "strata-doctor init --apply", "unset": "lock, release_pool",
                              "settings": [("given on the command line: --arena 46.84GiB",
                                            "arena: 46.84GiB")]},
}


def test_the_preflight_says_what_its_check_is_given() -> None:
    given = "--config /etc/strata-doctor.yaml --arena 46.84GiB"
    text = render_template("preflight-dropin.conf.j2", dict(CONTEXTS["preflight-dropin.conf.j2"],
                                                            finding="--preflight", given=given))
    assert f"# The check is given what `fix` was run with, so it checks the same sizes: {given}.\n" in text
    assert "given" not in _render("preflight-dropin.conf.j2")


def test_the_config_init_writes_reads_back() -> None:
    import yaml

    text = _render("strata-doctor.yaml.j2")
    assert text.startswith("# Managed by strata-doctor: written by `strata-doctor init --apply`.\n")
    assert yaml.safe_load(text) == {"arena": "46.84GiB"}
    assert text.endswith("\n# Not set here, so their defaults apply (docs/config.md): lock, release_pool.\n")


def _templates() -> List[str]:
    return sorted(p.name for p in files("strata_doctor.templates").iterdir()
                  if p.name.endswith(".j2") and not p.name.startswith("_"))


def _render(name: str) -> str:
    return render_template(name, dict({"finding": "test/finding"}, **CONTEXTS[name]))


def test_every_fix_template_has_a_sample() -> None:
    assert set(CONTEXTS) <= set(_templates())


@pytest.mark.parametrize("name", sorted(CONTEXTS))
def test_header_and_reproducible(name: str) -> None:
    text = _render(name)
    head = text.splitlines()[:5]
    assert any(MANAGED_MARKER in line for line in head)
    assert any("strata-doctor fix --revert" in line for line in head)
    assert text == _render(name)
    assert not re.search(r"\d{4}-\d\d-\d\d|\d\d:\d\d:\d\d", text), "no timestamps in generated files"
    assert text.endswith("\n") and "\n\n\n" not in text


@pytest.mark.parametrize("name", sorted(CONTEXTS))
def test_missing_variable_is_an_error(name: str) -> None:
    import jinja2

    context = dict(CONTEXTS[name], finding="x")
    first = sorted(k for k in CONTEXTS[name] if k != "finding")[0]
    del context[first]
    with pytest.raises(jinja2.UndefinedError):
        render_template(name, context)


def parse_sysctl_d(text: str) -> List[Tuple[str, str]]:
    """sysctl.d(5): blank lines, '#' or ';' comments, and ``key = value`` with optional spaces."""
    pairs = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        key, sep, value = line.partition("=")
        assert sep, f"line {number} is neither a comment nor key = value: {raw!r}"
        key = key.strip().lstrip("-")
        assert re.fullmatch(r"[a-z0-9_]+([./][a-z0-9_*]+)+", key), f"line {number}: bad key {key!r}"
        pairs.append((key, value.strip()))
    return pairs


def test_sysctl_file_parses() -> None:
    text = render_template("sysctl.conf.j2", {
        "settings": [("vm.nr_hugepages", 0, "the trap"), ("vm.nr_overcommit_hugepages", "0", "surplus")],
        "finding": "hugepages/trap",
    })
    assert parse_sysctl_d(text) == [("vm.nr_hugepages", "0"), ("vm.nr_overcommit_hugepages", "0")]
    assert "# the trap\nvm.nr_hugepages = 0\n" in text
    try:
        from strata_doctor.facts.sysctl import parse_sysctl_conf
    except ImportError:
        return
    assert parse_sysctl_conf(text) == [("vm.nr_hugepages", "0"), ("vm.nr_overcommit_hugepages", "0")]


@pytest.mark.skipif(shutil.which("bash") is None, reason="bash is not installed")
def test_wrapper_passes_bash_n(tmp_path: Path) -> None:
    wrapper = tmp_path / "strata-numa"
    wrapper.write_text(_render("strata-numa.j2"))
    subprocess.run(["bash", "-n", str(wrapper)], check=True)
    assert 'exec numactl --preferred=1 --cpunodebind=1 -- "$@"' in wrapper.read_text()


@pytest.mark.skipif(shutil.which("bash") is None, reason="bash is not installed")
def test_wrapper_says_when_numactl_is_missing(tmp_path: Path) -> None:
    wrapper = tmp_path / "strata-numa"
    wrapper.write_text(_render("strata-numa.j2"))
    env = dict(os.environ, PATH=str(tmp_path / "empty"))
    done = subprocess.run(["/bin/bash", str(wrapper), "true"], env=env, capture_output=True, text=True,
                          check=False)
    assert done.returncode == 127 and "numactl is not installed" in done.stderr


def _verify(unit_dir: Path, unit: str) -> Tuple[int, str]:
    env = dict(os.environ, SYSTEMD_UNIT_PATH=f"{unit_dir}:", SYSTEMD_LOG_LEVEL="notice")
    try:
        done = subprocess.run(["systemd-analyze", "verify", "--man=no", str(unit_dir / unit)],
                              env=env, capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        pytest.skip(f"systemd-analyze cannot run here: {exc}")
    return done.returncode, done.stdout + done.stderr


SYNTAX = re.compile(r"Unknown (key|section|lvalue)|Failed to parse|[Ii]nvalid|bad-setting|Missing '='")


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed")
def test_generated_units_pass_systemd_analyze_verify(tmp_path: Path) -> None:
    tree = make_host(tmp_path, "two-node-252")
    result = run_cli(["fix", "--root", str(tree), "--apply", "--reserve-node", "--preflight"])
    assert result.exit_code == 0, result.stderr
    unit_dir = tree / "etc/systemd/system"
    (unit_dir / "strata.service.d/70-test-oomd.conf").write_text(_render("oomd-dropin.conf.j2"))
    (unit_dir / "strata.service.d/70-test-memlock.conf").write_text(_render("memlock-dropin.conf.j2"))
    (unit_dir / "strata.service.d/70-test-swap.conf").write_text(_render("swap-dropin.conf.j2"))
    code, output = _verify(unit_dir, "strata.service")
    if "Failed to" in output and "verify" not in output and code != 0 and not SYNTAX.search(output):
        pytest.skip(f"systemd-analyze verify cannot run unprivileged here: {output.strip()[:200]}")
    assert not SYNTAX.search(output), output
    # systemd looks ExecStartPre= up on its own PATH; this test machine may lack the tool there.
    leftovers = [line for line in output.splitlines()
                 if line.strip() and "strata-doctor is not executable" not in line]
    assert not leftovers, output
    code, output = _verify(unit_dir, "strata.slice")
    assert code == 0 and not SYNTAX.search(output), output
    for name in ("system.slice", "user.slice"):
        code, output = _verify(unit_dir, name)
        assert not SYNTAX.search(output), output

"""check --format prometheus|nfd: node_exporter textfile metrics and NFD feature labels."""

from __future__ import annotations

import contextlib
import re
from pathlib import Path
from typing import Dict

from strata_doctor.output.fleet import write_atomic
from tests.conftest import run_cli

SAMPLE = re.compile(r'^[a-z_]+(\{[a-z_]+="[^"\\\n]*"(,[a-z_]+="[^"\\\n]*")*\})? -?[0-9.e+]+$')


def _samples(text: str) -> Dict[str, float]:
    values = {}
    for line in text.splitlines():
        if line.startswith("#"):
            assert re.match(r"^# (HELP|TYPE) strata_doctor_[a-z_]+ ", line), line
            continue
        assert SAMPLE.match(line), line
        name, _, value = line.rpartition(" ")
        values[name] = float(value)
    return values


def test_prometheus_metrics(two_node_host: Path) -> None:
    result = run_cli(["check", "--root", str(two_node_host), "--arena", "8GiB", "--format", "prometheus"])
    assert result.exit_code == 1  # the exit code stays that of check
    values = _samples(result.stdout)
    assert values["strata_doctor_ready"] == 0
    assert values["strata_doctor_exit_code"] == 1
    assert values['strata_doctor_finding{check="numa-binding",id="unbound",severity="error"}'] == 1
    assert values['strata_doctor_gpu_numa_node{gpu="0000:81:00.0"}'] == 1
    # node 1: 16 GiB - (8 GiB arena + 4 GiB headroom)
    assert values['strata_doctor_arena_headroom_bytes{nodes="1"}'] == 4 * 2**30
    assert values['strata_doctor_findings{severity="error"}'] >= 1
    assert "# TYPE strata_doctor_finding gauge" in result.stdout
    assert not re.search(r" \d{13}$", result.stdout, re.M)  # no timestamps


def test_prometheus_ready_host(two_node_host: Path) -> None:
    result = run_cli(["check", "--root", str(two_node_host), "--format", "prometheus",
                      "--ignore", "numa-binding"])
    assert result.exit_code == 0
    values = _samples(result.stdout)
    assert values["strata_doctor_ready"] == 1
    assert not any(k.startswith("strata_doctor_arena_headroom_bytes") for k in values)  # no arena


def test_prometheus_output_is_written_atomically(two_node_host: Path, tmp_path: Path) -> None:
    out = tmp_path / "textfile" / "strata_doctor.prom"
    out.parent.mkdir()
    out.write_text("old\n")
    result = run_cli(["check", "--root", str(two_node_host), "--format", "prometheus",
                      "--output", str(out)])
    assert result.stdout == ""
    assert out.read_text().startswith("# HELP strata_doctor_ready")
    assert out.stat().st_mode & 0o777 == 0o644
    assert [p.name for p in out.parent.iterdir()] == ["strata_doctor.prom"]  # no temp left


def test_write_atomic_leaves_no_temp_file_on_failure(tmp_path: Path) -> None:
    target = tmp_path / "dir-in-the-way"
    target.mkdir()
    (target / "x").write_text("keep")
    with contextlib.suppress(OSError):
        write_atomic(str(target), "new\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dir-in-the-way"]


def test_output_takes_the_text_format_too(two_node_host: Path, tmp_path: Path) -> None:
    """--output is for every format (tests/test_output_through.py), not only the fleet's."""
    result = run_cli(["check", "--root", str(two_node_host), "--output", str(tmp_path / "x")])
    assert result.exit_code in (0, 1) and result.stdout == "" and not result.stderr
    assert "(exit " in (tmp_path / "x").read_text()


def test_nfd_labels(two_node_host: Path) -> None:
    result = run_cli(["check", "--root", str(two_node_host), "--arena", "8GiB", "--format", "nfd"])
    labels = dict(
        line.split("=", 1) for line in result.stdout.splitlines() if not line.startswith("#")
    )
    assert labels["strata-doctor.ready"] == "false"
    assert labels["strata-doctor.gpu-numa-node"] == "1"
    assert labels["strata-doctor.numa-nodes"] == "2"
    assert labels["strata-doctor.arena-fits"] == "true"
    assert labels["strata-doctor.failing"] == "numa-binding"
    for name, value in labels.items():
        # NFD local source: name[=value]; Kubernetes label values are at most 63 characters.
        assert re.fullmatch(r"[a-z0-9.-]+", name) and len(name) <= 63
        assert re.fullmatch(r"([A-Za-z0-9]([A-Za-z0-9_.-]{0,61}[A-Za-z0-9])?)?", value), value


def test_nfd_output_file(two_node_host: Path, tmp_path: Path) -> None:
    out = tmp_path / "strata-doctor"
    result = run_cli(["check", "--root", str(two_node_host), "--format", "nfd", "--output", str(out),
                      "--ignore", "numa-binding"])
    assert result.exit_code == 0
    assert "strata-doctor.ready=true" in out.read_text().splitlines()


def test_textfile_units_render(tmp_path: Path) -> None:
    import shutil
    import subprocess

    from strata_doctor.fix.plan_files import render_template

    service = render_template("strata-doctor-textfile.service.j2",
                              {"doctor": "/usr/bin/true", "check_args": " --arena 46.84GiB"})
    timer = render_template("strata-doctor-textfile.timer.j2", {})
    assert service.startswith("# Managed by strata-doctor") and timer.startswith("# Managed by strata-doctor")
    assert "ExecStart=/usr/bin/true check --format prometheus --output " in service
    assert "SuccessExitStatus=1" in service and "OnUnitActiveSec=5min" in timer
    assert not re.search(r"\d{4}-\d{2}-\d{2}", service + timer)  # no timestamps
    analyze = shutil.which("systemd-analyze")
    if analyze:
        (tmp_path / "strata-doctor-textfile.service").write_text(service)
        (tmp_path / "strata-doctor-textfile.timer").write_text(timer)
        result = subprocess.run([analyze, "verify", str(tmp_path / "strata-doctor-textfile.timer"),
                                 str(tmp_path / "strata-doctor-textfile.service")],
                                capture_output=True, text=True, check=False)
        assert "strata-doctor-textfile" not in result.stderr or result.returncode == 0, result.stderr

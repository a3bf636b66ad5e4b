"""The unit-file reader (doctor/facts/unitfile.py) against systemd itself: one unit whose
``ExecStart=`` is reset by an empty assignment and then continued over three lines with
``\\``, a comment line inside the continuation and quoted words. Inside the guest, systemd's
own reading (``systemctl show -p ExecStart``) and the doctor's (the merged ``ExecStart=``
split into words) must name the same argv. One short boot of its own, so this file runs
alone:

    python3 -m pytest -m vm tests/vm/test_vm_unitfile.py -q -p no:cacheprovider
"""

from __future__ import annotations

import json
import re
import shutil
from typing import Iterator, List

import pytest
from guest import BootResult, Image, Payload, Step, boot
from topologies import TOPOLOGIES
from vmharness import BOOT_TIMEOUT, artifacts_root

pytestmark = [pytest.mark.vm, pytest.mark.topology("seed")]

NAME = "seed"
UNIT = "continued.service"
UNIT_TEXT = """\
[Unit]
Description=ExecStart= over several lines

[Service]
Type=simple
ExecStart=/bin/false
ExecStart=
ExecStart=/bin/sleep 3600 \\
# a comment inside the continuation is not part of the value
  --model /opt/strata/models/expert.gguf \\
  "--port" '8080'
"""
EXPECTED = ["/bin/sleep", "3600", "--model", "/opt/strata/models/expert.gguf", "--port", "8080"]
DOCTOR_READS = (
    "python3 -c 'import json; from strata_doctor.root import Root; "
    "from strata_doctor.facts.engine import unit_exec_start; "
    "from strata_doctor.facts.unitfile import split_command; "
    f"print(json.dumps(split_command(unit_exec_start(Root(\"/\"), \"{UNIT}\") or \"\")))'"
)


def steps() -> List[Step]:
    return [
        Step("systemd-reads", f"systemctl daemon-reload && systemctl show -p ExecStart --value {UNIT}"),
        Step("doctor-reads", DOCTOR_READS),
    ]


@pytest.fixture(scope="module")
def booted(guest_image: Image) -> Iterator[BootResult]:
    topology = TOPOLOGIES[NAME]
    artifacts = artifacts_root() / "unitfile"
    if artifacts.exists():
        shutil.rmtree(artifacts)
    files = {f"etc/systemd/system/{UNIT}": (UNIT_TEXT.encode(), 0o644)}
    result = boot(topology, Payload(steps(), files), artifacts, guest_image, timeout=BOOT_TIMEOUT)
    if result.error:
        pytest.fail(f"{NAME} guest: {result.error}; console: {result.artifacts}/console.log", pytrace=False)
    yield result


def systemd_argv(result: BootResult) -> str:
    ran = result.step("systemd-reads")
    assert ran.rc == 0, ran.describe()
    # "{ path=/bin/sleep ; argv[]=/bin/sleep 3600 --model ... ; ignore_errors=no ; ... }"
    found = re.findall(r"argv\[\]=(.*?) ;", ran.stdout)
    assert len(found) == 1, ran.describe()  # the empty assignment dropped /bin/false
    return str(found[0])


def test_systemd_reads_the_continued_exec_start(booted: BootResult) -> None:
    assert systemd_argv(booted) == " ".join(EXPECTED)


def test_the_doctor_reads_what_systemd_reads(booted: BootResult) -> None:
    ran = booted.step("doctor-reads")
    assert ran.rc == 0, ran.describe()
    argv = json.loads(ran.stdout)
    assert argv == EXPECTED
    assert " ".join(argv) == systemd_argv(booted)

"""The vm tests' harness: where artifacts go, whether guests can run, one boot per topology."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Dict

import pytest
from guest import BootResult, Image, boot, find_image
from scenarios import payload_for
from topologies import TOPOLOGIES

HERE = Path(__file__).resolve().parent
BOOT_TIMEOUT = float(os.environ.get("STRATA_VM_BOOT_TIMEOUT", "900"))


def artifacts_root() -> Path:
    return Path(os.environ.get("STRATA_VM_ARTIFACTS") or HERE / "artifacts")


def skip_reason() -> str:
    if sys.platform != "linux":
        return "the vm tests need Linux"
    if not shutil.which("qemu-system-x86_64"):
        return "qemu-system-x86_64 is not installed (apt-get install qemu-system-x86)"
    if find_image() is None:
        if not shutil.which("debootstrap"):
            return "no cached guest image and no debootstrap to build one"
        if os.geteuid() != 0 and not (shutil.which("sudo") and subprocess.run(
            ["sudo", "-n", "true"], capture_output=True, check=False
        ).returncode == 0):
            return "no cached guest image, and building one needs root or passwordless sudo"
    return ""


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

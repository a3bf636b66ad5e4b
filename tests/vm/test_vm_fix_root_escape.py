"""`fix --apply --root TREE` inside a real guest, where the tree's ``etc`` links to the
guest's own ``/etc``: the guest's ``/etc`` must be untouched (docs/fix.md#safety).

The tree is the seed-box fixture, unpacked in the guest, in two layouts:

* ``etc -> /etc``: inside the root that is the link itself, a loop; the apply is refused
  with one line and exit 2, and nothing is written anywhere;
* ``etc -> /etc.captured``: an absolute link taken relative to the root, so the fixes land
  in ``TREE/etc.captured``, and ``--revert`` restores the tree byte for byte.

This file boots its own small guest (the ``no-numa-info`` topology: the fixture brings its
own facts), so it runs alone: ``python3 -m pytest -m vm tests/vm/test_vm_fix_root_escape.py``.
"""

from __future__ import annotations

import io
import tarfile
from pathlib import Path
from typing import Iterator

import pytest
from guest import BootResult, Image, Payload, Step, boot
from topologies import TOPOLOGIES
from vmharness import BOOT_TIMEOUT, artifacts_root

pytestmark = pytest.mark.vm

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "hosts" / "seed-box"
TREE = "/srv/tree"
# Everything under the guest's /etc, and the tree, as type, mode, path and link target,
# plus the sha256 of every regular file: equal digests mean byte-for-byte equal trees.
# (Two processes per tree: under software emulation a process per file takes minutes.)
STATE = (
    "{{ find {top} -printf '%y %m %p -> %l\\n'; find {top} -type f -print0 | xargs -0 -r sha256sum; }} "
    "| LC_ALL=C sort | sha256sum | cut -c1-64"
)
FIX = f"strata-doctor fix --root {TREE} --reserve-node --yes"


def _fixture_tar() -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        tar.add(FIXTURE, arcname=".")
    return buffer.getvalue()


def _steps() -> Payload:
    unpack = (
        f"set -e; rm -rf {TREE}; mkdir -p {TREE}; tar -xzf /strata-test/seed-box.tar.gz -C {TREE}; "
        f"mv {TREE}/etc {TREE}/etc.captured; "
    )
    steps = [
        # etc -> /etc: a loop inside the root.
        Step("loop-setup", unpack + f"ln -s /etc {TREE}/etc; ls -la {TREE}"),
        Step("loop-etc-before", STATE.format(top="/etc")),
        Step("loop-tree-before", STATE.format(top=TREE)),
        Step("loop-apply", f"{FIX} --apply"),
        Step("loop-etc-after", STATE.format(top="/etc")),
        Step("loop-tree-after", STATE.format(top=TREE)),
        Step("loop-revert", f"{FIX} --revert"),
        Step("loop-tree-reverted", STATE.format(top=TREE)),
        # etc -> /etc.captured: absolute, taken relative to the root.
        Step("abs-setup", unpack + f"ln -s /etc.captured {TREE}/etc"),
        Step("abs-etc-before", STATE.format(top="/etc")),
        Step("abs-tree-before", STATE.format(top=TREE)),
        Step("abs-apply", f"{FIX} --apply"),
        Step("abs-written", f"ls {TREE}/etc.captured/systemd/system/strata.service.d/ "
                            f"{TREE}/etc.captured/systemd/system/strata.slice; "
                            "ls /etc.captured 2>&1 || true"),
        Step("abs-etc-after", STATE.format(top="/etc")),
        Step("abs-revert", f"{FIX} --revert"),
        Step("abs-tree-reverted", STATE.format(top=TREE)),
        Step("abs-etc-reverted", STATE.format(top="/etc")),
    ]
    return Payload(steps, {"strata-test/seed-box.tar.gz": (_fixture_tar(), 0o644)})


@pytest.fixture(scope="module")
def escape_guest(guest_image: Image) -> Iterator[BootResult]:
    if not FIXTURE.is_dir():
        pytest.skip("tests/fixtures/hosts/seed-box is missing")
    topology = TOPOLOGIES["no-numa-info"]
    result = boot(topology, _steps(), artifacts_root() / "fix-root-escape", guest_image,
                  timeout=BOOT_TIMEOUT)
    if result.error:
        pytest.fail(f"guest: {result.error}; console: {result.artifacts}/console.log", pytrace=False)
    yield result


def test_etc_linked_to_the_guests_etc_is_refused(escape_guest: BootResult) -> None:
    assert escape_guest.step("loop-setup").rc == 0, escape_guest.step("loop-setup").stderr
    applied = escape_guest.step("loop-apply")
    assert applied.rc == 2, applied.stdout + applied.stderr
    assert "Traceback" not in applied.stderr
    assert len(applied.stderr.strip().splitlines()) == 1, applied.stderr
    assert "symbolic links" in applied.stderr or "symlink" in applied.stderr, applied.stderr
    assert escape_guest.step("loop-etc-after").stdout == escape_guest.step("loop-etc-before").stdout
    assert escape_guest.step("loop-tree-after").stdout == escape_guest.step("loop-tree-before").stdout
    reverted = escape_guest.step("loop-revert")
    assert reverted.rc == 0 and "Nothing to revert" in reverted.stdout, reverted.stdout + reverted.stderr
    assert escape_guest.step("loop-tree-reverted").stdout == escape_guest.step("loop-tree-before").stdout


def test_absolute_etc_link_is_taken_inside_the_tree(escape_guest: BootResult) -> None:
    applied = escape_guest.step("abs-apply")
    assert applied.rc in (0, 1), applied.stdout + applied.stderr
    written = escape_guest.step("abs-written")
    assert "60-strata-doctor-numa.conf" in written.stdout, written.stdout + written.stderr
    assert "No such file or directory" in written.stdout + written.stderr  # the guest has no /etc.captured
    assert escape_guest.step("abs-etc-after").stdout == escape_guest.step("abs-etc-before").stdout
    reverted = escape_guest.step("abs-revert")
    assert reverted.rc == 0, reverted.stdout + reverted.stderr
    assert escape_guest.step("abs-tree-reverted").stdout == escape_guest.step("abs-tree-before").stdout
    assert escape_guest.step("abs-etc-reverted").stdout == escape_guest.step("abs-etc-before").stdout

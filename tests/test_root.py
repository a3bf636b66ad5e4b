"""Root: the one way to read a host, and what it records for bundles."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Iterator, Optional, Tuple

from strata_doctor.fileread import read_all
from strata_doctor.model import Finding
from strata_doctor.root import Command, Root
from tests.conftest import write_tree


def test_absolute_host_paths_stay_under_the_root(tmp_path: Path) -> None:
    write_tree(tmp_path, {"/proc/meminfo": "MemTotal: 1 kB\n"})
    root = Root(tmp_path)
    assert root.read("/proc/meminfo") == "MemTotal: 1 kB\n"
    assert root.path("/proc/meminfo") == tmp_path / "proc" / "meminfo"


def test_missing_empty_and_nul_files_are_facts(tmp_path: Path) -> None:
    write_tree(tmp_path, {"/sys/a": "", "/sys/b": "0-3\x00\x00\n"})
    root = Root(tmp_path)
    assert root.read("/sys/missing") is None
    assert root.reads["/sys/missing"] == "missing"
    assert root.read_value("/sys/a") is None
    assert root.read_value("/sys/b") == "0-3"


def test_files_of_every_size_read_whole(tmp_path: Path) -> None:
    """Around each read size: the first 64 KiB read, the large-file reread, 1 MiB chunks."""
    for size in (0, 1, 65535, 65536, 65537, (1 << 20) + 65536, 3 * (1 << 20) + 7):
        data = bytes(index % 251 for index in range(size))
        (tmp_path / f"f{size}").write_bytes(data)
        assert Root(tmp_path).read_bytes(f"/f{size}") == data


def test_a_pipe_reads_whole_though_it_cannot_seek() -> None:
    read_end, write_end = os.pipe()
    data = b"N0=1 " * 30000  # more than one 64 KiB read

    def write() -> None:
        with os.fdopen(write_end, "wb") as out:
            out.write(data)

    writer = threading.Thread(target=write)
    writer.start()
    try:
        assert read_all(read_end) == data
    finally:
        writer.join()


def test_a_fifo_or_device_in_a_captured_tree_is_refused_at_once(tmp_path: Path) -> None:
    """A FIFO would wait for a writer forever, a device such as /dev/zero never end."""
    os.mkfifo(tmp_path / "fifo")
    os.symlink("fifo", tmp_path / "link")
    root = Root(tmp_path)
    for path in ("/fifo", "/link"):
        assert root.read_bytes(path) is None
        assert root.reads[path] == "not a regular file"


def test_reads_probes_and_links_are_recorded(tmp_path: Path) -> None:
    write_tree(tmp_path, {"/sys/x": "1\n", "/sys/l": "->x"})
    root = Root(tmp_path)
    root.read("/sys/x")
    assert root.content("/sys/x") == b"1\n"
    assert root.exists("/.dockerenv") is False
    assert root.probes["/.dockerenv"] is False
    assert root.readlink("/sys/l") == "x"
    assert root.readlink("/sys/x") is None and root.reads["/sys/x"] is None  # read earlier
    assert root.readlink("/sys/nothing") is None
    assert root.reads["/sys/nothing"]


def test_captured_stat_sizes_win_over_stand_ins(tmp_path: Path) -> None:
    capture = {"/dev/hugepages/arena": {"size": 16 * 2**30, "uid": 1000, "mode": 0o100600}}
    write_tree(tmp_path, {
        "/dev/hugepages/arena": "",
        "/.strata-doctor/stat.json": json.dumps(capture),
    })
    root = Root(tmp_path)
    found = root.stat("/dev/hugepages/arena")
    assert found is not None and (found.size, found.uid) == (16 * 2**30, 1000)
    assert root.file_size("/dev/hugepages/arena") == 16 * 2**30
    assert root.stat("/dev/hugepages/none") is None


def test_commands_replay_from_the_capture_never_the_live_host(tmp_path: Path) -> None:
    write_tree(tmp_path, {
        "/.strata-doctor/commands/systemctl-show-strata.service.txt": "LoadState=loaded\n",
        "/.strata-doctor/commands/systemctl-show-strata.service.rc": "3\n",
    })
    root = Root(tmp_path)
    shown = root.run(Command("systemctl-show-strata.service", ("systemctl", "show", "strata.service")))
    assert (shown.stdout, shown.status, shown.missing) == ("LoadState=loaded\n", 3, False)
    absent = root.run(Command("nvidia-smi", ("nvidia-smi",)))
    assert absent.missing and absent.status is None


def _rendezvous(me: str, other: str, where: Path) -> Command:
    """A command that leaves its mark and waits up to 5 s for the other's: both succeed
    only when the two run at the same time."""
    script = (f'touch "{where}/{me}"; i=0; while [ $i -lt 100 ]; do [ -e "{where}/{other}" ] && exit 0; '
              'sleep 0.05; i=$((i+1)); done; exit 1')
    return Command(f"rendezvous-{me}", ("sh", "-c", script))


def test_declared_commands_start_together_before_any_check_asks(tmp_path: Path) -> None:
    """oomd's applies() reads three commands: they must not run one by one."""
    from strata_doctor.config import load_config
    from strata_doctor.context import HostContext
    from strata_doctor.registry import Check, run_checks

    def waiting(name: str, other: str) -> type:
        class Waits(Check):
            """Needs its command to have met the other's."""

            id = f"waits-{name}"
            title = name

            def commands(self, ctx: HostContext) -> Tuple[Command, ...]:
                return (_rendezvous(name, other, tmp_path),)

            def applies(self, ctx: HostContext) -> Optional[str]:
                met = ctx.root.run(_rendezvous(name, other, tmp_path)).status == 0
                return None if met else "ran alone"

            def run(self, ctx: HostContext) -> Iterator[Finding]:
                return iter(())

        return Waits

    live = Root("/")  # commands run for real; they touch only tmp_path
    results = run_checks(HostContext(live, load_config(live, None)), [waiting("a", "b"), waiting("b", "a")])
    assert [(r.check, r.skip) for r in results] == [("waits-a", None), ("waits-b", None)]

"""What a replayed check imports, and that the cheap plug-in look-up still finds plug-ins."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from strata_doctor.registry import ENTRY_POINT_GROUP, _group_may_be_declared, plugin_checks
from tests.conftest import HOSTS, write_tree

HEAVY = ("jinja2", "yaml", "psutil", "subprocess", "concurrent.futures", "importlib.metadata")


def _modules_after(code: str) -> set[str]:
    code += "\nimport sys, json; print(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False).stdout
    return set(json.loads(out.splitlines()[-1]))


def test_replayed_check_imports_nothing_heavy(two_node_host: Path) -> None:
    if _group_may_be_declared():
        pytest.skip("a plug-in is installed here: importlib.metadata is needed")
    baseline = _modules_after("pass")
    code = textwrap.dedent(f"""
        from strata_doctor.cli import main
        try:
            main(["check", "--root", {str(two_node_host)!r}, "--quiet"])
        except SystemExit:
            pass
    """)
    loaded = _modules_after(code) - baseline
    assert not [m for m in HEAVY if m in loaded]


def test_plugins_are_still_found(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "demo_strata_plugin.py").write_text(textwrap.dedent("""
        from strata_doctor.registry import Check

        class DemoCheck(Check):
            '''A demo.'''
            id = "demo-plugin"
            title = "Demo"

            def run(self, ctx):
                return iter(())
    """))
    info = tmp_path / "demo_strata_plugin-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: demo-strata-plugin\nVersion: 1.0\n")
    entry = "demo-plugin = demo_strata_plugin:DemoCheck"
    (info / "entry_points.txt").write_text(f"[{ENTRY_POINT_GROUP}]\n{entry}\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert _group_may_be_declared()
    found, failed = plugin_checks()
    assert [c.id for c in found] == ["demo-plugin"] and failed == []


def test_yaml_is_imported_only_when_a_config_exists(two_node_host: Path) -> None:
    """PyYAML alone reads the config (no hand-written subset), and only when there is one."""
    write_tree(two_node_host, {"/etc/strata-doctor.yaml": "# engine\narena: 8GiB\nkv: 1GiB\nworkers: 4\n"})
    code = textwrap.dedent(f"""
        from strata_doctor.cli import main
        try:
            main(["check", "--root", {str(two_node_host)!r}, "--quiet"])
        except SystemExit:
            pass
    """)
    assert "yaml" in _modules_after(code) - _modules_after("pass")


# -- the console script's exit ----------------------------------------------------
SEED = HOSTS / "seed-box"
# An object whose finalizer speaks only when the interpreter is torn down.
_WATCHED = textwrap.dedent("""
    import atexit, gc, sys
    from strata_doctor.cli import run

    class Watched:
        def __del__(self):
            sys.stderr.write("torn down\\n")

    watched = Watched()
    atexit.register(lambda: sys.stderr.write(f"collector {'on' if gc.isenabled() else 'off'}\\n"))
    sys.argv = ["strata-doctor", *sys.argv[1:]]
    run()
""")


def _console(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", _WATCHED, *args], capture_output=True, text=True,
                          check=False, env=env)


def test_read_only_commands_skip_the_teardown_and_keep_their_output() -> None:
    done = _console("check", "--root", str(SEED), "--format", "json")
    assert done.returncode == 1
    assert json.loads(done.stdout)["ready"] is False  # the whole document, flushed
    assert "torn down" not in done.stderr and "collector off" in done.stderr
    plan = _console("numa-plan", "--root", str(SEED), "--arena", "46.84GiB", "--format", "shell")
    assert (plan.returncode, plan.stdout) == (0, "numactl --preferred=1 --cpunodebind=1\n")


def test_writing_commands_and_errors_end_the_ordinary_way(tmp_path: Path) -> None:
    report = _console("report", "--root", str(SEED), "--output", str(tmp_path / "r.md"))
    assert report.returncode == 0 and (tmp_path / "r.md").read_text().startswith("#")
    assert "torn down" in report.stderr and "collector on" in report.stderr
    usage = _console("check", "--root", str(SEED), "--no-such-option")
    assert usage.returncode == 2 and "No such option" in usage.stderr


def test_exit_handlers_still_run(tmp_path: Path) -> None:
    """A replayed bundle is unpacked into a temporary tree that an exit handler removes."""
    bundle = tmp_path / "seed.tar.gz"
    made = _console("report", "--root", str(SEED), "--bundle", str(bundle))
    assert made.returncode == 0, made.stderr
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    env = {**os.environ, "TMPDIR": str(scratch)}
    replay = _console("check", "--bundle", str(bundle), "--quiet", env=env)
    assert replay.returncode == 1 and "numa-binding/unbound" in replay.stdout
    assert "torn down" not in replay.stderr
    assert list(scratch.iterdir()) == []


def test_closed_output_streams_are_no_error() -> None:
    """Started with stdout (and stderr) closed, Python sets them to None."""
    for closed in (">&-", ">&- 2>&-"):
        done = subprocess.run(["sh", "-c", f'exec "$0" -c "$1" check --root "$2" --quiet {closed}',
                               sys.executable, _WATCHED, str(SEED)],
                              capture_output=True, text=True, check=False)
        assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr

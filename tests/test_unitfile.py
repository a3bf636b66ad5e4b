"""Unit files read by systemd's rules: continuations, comments, quoting, empty resets."""

from __future__ import annotations

from pathlib import Path

from strata_doctor.config import EngineConfig
from strata_doctor.context import HostContext
from strata_doctor.facts.unitfile import parse_ini, split_command
from strata_doctor.facts.units import unit_settings
from strata_doctor.fix.binding import binding_fix_for
from strata_doctor.root import Root
from tests.conftest import UNBOUND_UNIT, two_node_files, write_tree

CONTINUED = (
    "[Unit]\nDescription=Strata engine\n\n[Service]\n"
    "ExecStart=/opt/strata/bin/strata-serve \\\n"
    "    --model /srv/models/moe.gguf \\\n"
    "    --port 8080\n"
    "Restart=always\n"
)


def test_a_continued_line_is_one_value() -> None:
    items = parse_ini(CONTINUED)
    exec_start = [v for s, k, v in items if k == "ExecStart"]
    assert len(exec_start) == 1
    assert split_command(exec_start[0]) == [
        "/opt/strata/bin/strata-serve", "--model", "/srv/models/moe.gguf", "--port", "8080"]
    assert [k for _, k, _ in items] == ["Description", "ExecStart", "Restart"]  # no bogus keys


def test_comments_inside_a_continuation_are_skipped() -> None:
    text = ("[S]\nKeyThree=value 3\\\n# this line is ignored\n; this line is ignored too\n"
            "   value 3 continued\n")
    assert parse_ini(text) == [("S", "KeyThree", "value 3    value 3 continued")]


def test_an_escaped_backslash_ends_the_line() -> None:
    assert parse_ini("[S]\nA=x\\\\\nB=y\n") == [("S", "A", "x\\\\"), ("S", "B", "y")]
    assert parse_ini("[S]\nA=x \\\n") == [("S", "A", "x")]  # the end of the file ends it


def test_line_ends_and_sections() -> None:
    assert parse_ini("[A]\r\nK=1\r\n[B]\rK=2\n#K=3\n  ;K=4\nnot a setting\n") == [
        ("A", "K", "1"), ("B", "K", "2")]


def test_quoting_stays_in_the_value_and_split_command_resolves_it() -> None:
    items = parse_ini('[Service]\nExecStart=/bin/serve "--name=a b" \'c d\' e\\ f\n')
    assert items == [("Service", "ExecStart", '/bin/serve "--name=a b" \'c d\' e\\ f')]
    assert split_command(items[0][2]) == ["/bin/serve", "--name=a b", "c d", "e f"]
    assert split_command('/bin/x "unclosed') == ["/bin/x", '"unclosed']


def test_an_empty_assignment_resets_the_list(tmp_path: Path) -> None:
    files = {
        "/etc/systemd/system/strata.service": CONTINUED,
        "/etc/systemd/system/strata.service.d/10-a.conf":
            "[Service]\nExecStart=\nExecStart=/bin/b \\\n  --x\n",
        "/etc/systemd/system/strata.service.d/20-b.conf": "[Service]\nRestart=\n",
    }
    root = Root(str(write_tree(tmp_path, files)))
    settings = unit_settings(root, "strata.service", "Service")
    assert settings["ExecStart"] == ("/bin/b    --x", "/etc/systemd/system/strata.service.d/10-a.conf")
    assert "Restart" not in settings


def test_systemd_239_wrapper_dropin_keeps_every_continued_argument(tmp_path: Path) -> None:
    """systemd 239 (no NUMAPolicy=): the drop-in's ExecStart= is the whole command."""
    files = two_node_files(unit_show=UNBOUND_UNIT)
    files["/etc/systemd/system/strata.service"] = CONTINUED
    files["/.strata-doctor/commands/systemctl-version.txt"] = "systemd 239 (239-78)\n"
    files["/sys/fs/cgroup/cgroup.controllers"] = "cpuset cpu io memory pids\n"
    ctx = HostContext(Root(str(write_tree(tmp_path, files))), EngineConfig())
    plan = ctx.binding_plan
    assert plan is not None
    fix = binding_fix_for(ctx, plan)
    dropin = next(dict(f.context) for f in fix.files if f.template == "numactl-exec-dropin.conf.j2")
    assert split_command(dropin["exec_start"]) == [
        "/opt/strata/bin/strata-serve", "--model", "/srv/models/moe.gguf", "--port", "8080"]
    assert "\\" not in dropin["exec_start"] and "\n" not in dropin["exec_start"]

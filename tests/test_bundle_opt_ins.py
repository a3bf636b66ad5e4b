"""A bundle keeps every setting the reporter's run had, the opt-ins among them
(docs/report.md, "Replay"): ``lock: true`` and ``release_pool: true`` change what check
says and what fix writes, so a replay without them would show another host."""

from __future__ import annotations

import tarfile
from pathlib import Path

import yaml

from strata_doctor.config import _KEYS, EngineConfig, parse_config
from strata_doctor.output.bundle import TOP
from strata_doctor.output.bundle_write import settings_yaml
from tests.conftest import copy_host, run_cli
from tests.test_replay import assert_replays, fix

GIB = 1024**3


def test_every_setting_survives_the_bundles_config_file() -> None:
    # Each key the parser knows, set away from its default: what the bundle writes reads
    # back as the same settings, so a setting added later cannot be left out unseen.
    given = EngineConfig(arena_bytes=47 * GIB, kv_bytes=3 * GIB, unit="engine.service", workers=12,
                         headroom_bytes=2 * GIB, hugepages="hugetlb", gpu="0000:41:00.0", numa="1",
                         lock=True, release_pool=True, model="/srv/models/m.gguf", context=8192,
                         cache_type="q8_0")
    text = settings_yaml(given).decode()
    data = yaml.safe_load(text)
    assert sorted(data) == sorted(_KEYS)
    replayed = parse_config(data, "/etc/strata-doctor.yaml")
    assert replayed._replace(source=None, gpu_source=None, given=()) == given._replace(gpu_source=None)


def test_opt_ins_left_unset_are_not_written() -> None:
    text = settings_yaml(EngineConfig(arena_bytes=47 * GIB)).decode()
    assert "lock:" not in text and "release_pool:" not in text


def test_a_bundle_made_with_release_pool_replays_with_it(tmp_path: Path) -> None:
    # ve-cards-pool: the vector engines' pool is left alone unless release_pool: true, which
    # lets fix write vm.nr_hugepages = 0; the replay must plan the same.
    root = copy_host("ve-cards-pool", tmp_path / "host")
    config = root / "etc/strata-doctor.yaml"
    config.write_text(config.read_text() + "release_pool: true\n")
    assert_replays(root, tmp_path)
    plan, _ = fix("--root", str(root))
    assert "vm.nr_hugepages = 0" in plan and "leave the 2 MiB pool alone" not in plan
    for bundle in ("plain.tar.gz", "redacted.tar.gz"):
        with tarfile.open(tmp_path / bundle) as tar:
            handle = tar.extractfile(f"{TOP}/etc/strata-doctor.yaml")
            assert handle is not None
            assert "release_pool: true" in handle.read().decode().splitlines()
        replayed, _ = fix("--bundle", str(tmp_path / bundle))
        assert "vm.nr_hugepages = 0" in replayed


def test_a_bundle_without_release_pool_keeps_the_pool_alone(tmp_path: Path) -> None:
    bundle = tmp_path / "b.tar.gz"
    root = copy_host("ve-cards-pool", tmp_path / "host")
    written = run_cli(["report", "--root", str(root), "--bundle", str(bundle), "--no-redact"])
    assert written.exit_code == 0, written.stderr
    replayed, _ = fix("--bundle", str(bundle))
    assert "leave the 2 MiB pool alone" in replayed and "vm.nr_hugepages = 0`" not in replayed

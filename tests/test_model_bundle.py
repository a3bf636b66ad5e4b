"""A bundle of a host whose model header was read holds that header's prefix, never the
multi-GiB file, with the file's real size in stat.json; and it replays to the same sizes."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

from strata_doctor.config import EngineConfig
from strata_doctor.facts.model_file import FIRST_READ, read_model
from strata_doctor.output.bundle import TOP, capture
from strata_doctor.output.bundle_replay import unpack
from strata_doctor.output.bundle_write import redact_capture, write_bundle
from strata_doctor.output.redact import Redactor
from strata_doctor.root import STAT_FILE, Root
from strata_doctor.rules.model_sizes import arena_from, kv_from
from tests.conftest import write_tree
from tests.ggufbytes import MOE_ARENA, gguf, moe_header, tensor, text, u32, write_sparse

MODEL = "/home/alice/models/moe.gguf"
SIZE = 47 << 30


def bundle_of(root: Root, out: Path) -> Path:
    """A bundle of what ``root`` recorded, written by the project's own writer."""
    redactor = Redactor()
    captured = capture(root, [], [])
    members = redact_capture(captured, redactor, EngineConfig())
    write_bundle(str(out), captured, members, redactor, {})
    return out


def test_the_bundle_keeps_the_header_prefix_and_replays_the_same_sizes(tmp_path: Path) -> None:
    host = tmp_path / "host"
    write_tree(host, {"/etc/hostname": "box\n"})
    write_sparse(host / MODEL.lstrip("/"), moe_header(), SIZE)
    root = Root(host)
    read = read_model(root, MODEL)
    assert read.header is not None
    assert root.head_of(MODEL) is not None and root.head_of(MODEL).size == SIZE  # type: ignore[union-attr]

    out = bundle_of(root, tmp_path / "b.tar.gz")
    with tarfile.open(out) as tar:
        names = {m.name: m for m in tar.getmembers()}
        model_member = [n for n in names if n.endswith("/models/moe.gguf")]
        assert len(model_member) == 1
        assert names[model_member[0]].size == FIRST_READ  # the first prefix held the header: 1 MiB of 47 GiB
        manifest = json.loads(tar.extractfile(f"{TOP}/manifest.json").read())  # type: ignore[union-attr]
    assert manifest["prefixes"][0]["kept"] == names[model_member[0]].size
    assert manifest["prefixes"][0]["host_size"] == SIZE

    replayed = unpack(out)
    replay_path = "/" + model_member[0].split("/", 1)[1]
    stats = json.loads((replayed / STAT_FILE).read_text())
    assert stats[replay_path]["size"] == SIZE
    again = Root(replayed)
    second = read_model(again, replay_path)
    assert second.header is not None
    assert second.header.tensors == read.header.tensors
    assert arena_from(second.header).bytes == arena_from(read.header).bytes == MOE_ARENA  # type: ignore[union-attr]
    assert kv_from(second.header, 4096) == kv_from(read.header, 4096)
    assert again.stat(replay_path).size == SIZE  # type: ignore[union-attr]


def test_a_header_is_bundled_byte_for_byte_unredacted(tmp_path: Path) -> None:
    """A placeholder of another length inside a length-prefixed string would break the
    header: the prefix is kept as read, while the paths that name it are redacted."""
    host = tmp_path / "host"
    data = gguf([text("general.architecture", "llama"),
                 text("general.name", "/home/alice/fine-tune 10.1.2.3"),
                 u32("llama.block_count", 1)], [tensor("blk.0.ffn_up_exps.weight", (256, 2, 2), 12)])
    (host / "srv").mkdir(parents=True)
    (host / "srv" / "m.gguf").write_bytes(data)
    root = Root(host)
    assert read_model(root, "/srv/m.gguf").header is not None
    out = bundle_of(root, tmp_path / "b.tar.gz")
    with tarfile.open(out) as tar:
        kept = tar.extractfile(f"{TOP}/srv/m.gguf").read()  # type: ignore[union-attr]
    assert kept == data
    replayed = read_model(Root(unpack(out)), "/srv/m.gguf").header
    assert replayed is not None and replayed.name == "/home/alice/fine-tune 10.1.2.3"


def test_read_head_reads_a_bounded_prefix_and_records_why_not(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    (tmp_path / "f").write_bytes(b"0123456789")
    root = Root(tmp_path)
    assert root.read_head("/f", 4) == b"0123"
    assert root.read_head("/f", 2) == b"01"
    assert root.read_head("/f", 100) == b"0123456789"  # a shorter file: all of it
    assert root.content("/f") == b"0123456789"  # the longest prefix is the one kept
    assert root.reads["/f"] is None
    assert root.read_head("/none", 4) is None and root.reads["/none"] == "missing"
    assert root.read_head("/d", 4) is None and root.reads["/d"] == "is a directory"
    assert root.read_head("/f2", 1 << 40) is None
    (tmp_path / "g").write_bytes(b"abc")
    assert root.read_head("/g", 1 << 40) is None
    assert (root.reads["/g"] or "").startswith("too large")


def test_a_whole_read_after_a_prefix_is_the_whole_file(tmp_path: Path) -> None:
    (tmp_path / "f").write_bytes(b"0123456789")
    root = Root(tmp_path)
    assert root.read_head("/f", 3) == b"012"
    assert root.head_of("/f") is not None
    assert root.read_bytes("/f") == b"0123456789"
    assert root.content("/f") == b"0123456789"
    assert root.head_of("/f") is None  # read whole: a bundle keeps the whole file

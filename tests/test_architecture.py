"""docs/architecture.md is held to the tree and to pyproject's layer contracts, so the
picture a newcomer reads first cannot drift from the code import-linter keeps."""

from __future__ import annotations

import re
import textwrap
from typing import Dict, List

import pytest

from tests.conftest import REPO

try:  # Python 3.11+
    import tomllib
except ImportError:  # pragma: no cover - Python 3.9 and 3.10
    tomllib = None  # type: ignore[assignment]

DOC = REPO / "docs" / "architecture.md"
TREE_START = "<!-- tree: tests/test_architecture.py writes it -->"
FOLDERS = ("cli", "probe", "output", "fix", "rules", "facts")
"""doctor/'s sub-packages, top layer first: the order the picture lists them in."""
WIDTH = 92


def tree_block() -> str:
    """The folders and their modules as the picture shows them, made from the tree."""
    doctor = REPO / "doctor"
    lines = ["doctor/        strata_doctor"]
    for folder in FOLDERS:
        lines += _row(f"  {folder}/", sorted(p.stem for p in (doctor / folder).glob("*.py")))
    lines += _row("  (top)", sorted(p.stem for p in doctor.glob("*.py")))
    lines.append("checks/        strata_doctor.checks: one module per check (a package for a long one)")
    lines.append("templates/     strata_doctor.templates: what the fixes render (Jinja2)")
    lines.append("docs/checks/   strata_doctor.pages: one page per check, what `explain` prints")
    return "\n".join(lines)


def _row(head: str, stems: List[str]) -> List[str]:
    body = " ".join(stems)
    return textwrap.wrap(body, WIDTH, initial_indent=f"{head:<15}", subsequent_indent=" " * 15)


def _doc_tree(text: str) -> str:
    start = text.index(TREE_START)
    block = text[start:].split("```", 2)[1]
    return block.strip("\n")


def _contract_layers() -> List[str]:
    with open(REPO / "pyproject.toml", "rb") as f:
        contracts = tomllib.load(f)["tool"]["importlinter"]["contracts"]
    first: Dict[str, object] = contracts[0]
    layers = first["layers"]
    assert isinstance(layers, list)
    return [str(layer) for layer in layers]


def _doc_layers(text: str) -> List[str]:
    """The first column of the layer table: each cell one contract layer, in backticks."""
    table = text.split("## Layers", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in table.splitlines() if line.startswith("| `")]
    cells = [re.match(r"\| `([^`]+)`", row).group(1) for row in rows]  # type: ignore[union-attr]
    return [cell.replace("\\|", "|") for cell in cells]  # Markdown escapes a table's pipes


def test_the_picture_lists_every_folder_and_module_as_they_are() -> None:
    folders = {p.parent.name for p in (REPO / "doctor").glob("*/__init__.py")}
    assert folders == set(FOLDERS), "a new sub-package needs its place in FOLDERS and the picture"
    text = DOC.read_text(encoding="utf-8")
    assert text.index(TREE_START) < text.index("## Layers"), "the doc opens with the tree"
    assert _doc_tree(text) == tree_block(), f"docs/architecture.md's tree should read:\n{tree_block()}"


@pytest.mark.skipif(tomllib is None, reason="reading pyproject.toml needs Python 3.11's tomllib")
def test_the_layer_table_is_the_layers_contract_in_its_order() -> None:
    assert _doc_layers(DOC.read_text(encoding="utf-8")) == _contract_layers()


def _layer_modules(layers: List[str]) -> List[str]:
    return [name.strip("() ") for layer in layers for name in re.split(r"[:|]", layer)]


@pytest.mark.skipif(tomllib is None, reason="reading pyproject.toml needs Python 3.11's tomllib")
def test_every_module_of_a_layered_folder_is_in_a_contract() -> None:
    """A module left out of the layer lists is one import-linter does not hold to its place."""
    with open(REPO / "pyproject.toml", "rb") as f:
        contracts = tomllib.load(f)["tool"]["importlinter"]["contracts"]
    named = {}
    for contract in contracts:
        if contract["type"] == "layers":
            for container in contract["containers"]:
                named.setdefault(container, set()).update(_layer_modules(contract["layers"]))
    top = named["strata_doctor"]
    for folder, container in (("fix", None), ("facts", "strata_doctor.facts"),
                              ("output", "strata_doctor.output"), ("cli", "strata_doctor.cli")):
        modules = {p.stem for p in (REPO / "doctor" / folder).glob("*.py")} - {"__init__"}
        listed = {m.split(".", 1)[1] for m in top if m.startswith(f"{folder}.")} if container is None \
            else named[container]
        assert modules <= listed, f"doctor/{folder}/: {sorted(modules - listed)} in no layer"
    modules = {p.stem for p in (REPO / "doctor").glob("*.py")} - {"__init__", "__main__"}
    assert modules <= top, f"doctor/: {sorted(modules - top)} in no layer"

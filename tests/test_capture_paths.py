"""docs/capture-layout.md names every host path the facts read, and `report --bundle` carries
the ones the odd captures depend on: the kernel's config, per-CPU cpufreq folders, isolated
and nohz_full CPUs, cpu/present, system.conf, a node's cpuN links, node/has_memory, the
pSeries LPAR's lparcfg and device-tree names."""

from __future__ import annotations

import ast
import gzip
import re
import tarfile
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Set

import pytest

from strata_doctor.output.bundle import TOP
from tests.conftest import REPO, copy_host, run_cli

DOC = REPO / "docs" / "capture-layout.md"
FACTS = REPO / "doctor" / "facts"
ROOTS = ("proc", "sys", "etc", "run", "boot", "usr", "lib", "var")
PLACE = "[^/`\\s]+"
"""What a placeholder (``{pid}`` in the code, ``PID`` or ``<release>`` in the page) stands for."""


def _constants(tree: ast.Module) -> Dict[str, str]:
    """A module's top-level string constants (``CPU_DIR = "/sys/..."``), f-strings of them included."""
    found: Dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            text = _text(node.value, found)
            if text is not None and "{" not in text:
                found[node.targets[0].id] = text
    return found


def _text(node: ast.AST, names: Dict[str, str]) -> Optional[str]:
    """A string literal, or an f-string with each unknown part as ``{}``."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        parts = []
        for value in node.values:
            if isinstance(value, ast.Constant):
                parts.append(str(value.value))
            elif isinstance(value, ast.FormattedValue) and isinstance(value.value, ast.Name) \
                    and value.value.id in names:
                parts.append(names[value.value.id])
            else:
                parts.append("{}")
        return "".join(parts)
    return None


def _host_path(text: str) -> bool:
    """Whether a literal is a host path: under a top folder the facts read, path characters only."""
    return text.startswith("/") and text[1:].split("/")[0] in ROOTS and \
        re.fullmatch(r"[\w./@:?{}+*-]+", text) is not None


def code_paths() -> Set[str]:
    """Every absolute host path the facts modules spell out (``{}`` where a value goes)."""
    paths: Set[str] = set()
    for module in sorted(FACTS.glob("*.py")):
        tree = ast.parse(module.read_text())
        names = _constants(tree)
        for node in ast.walk(tree):
            text = _text(node, names) if isinstance(node, (ast.Constant, ast.JoinedStr)) else None
            if text and _host_path(text):
                paths.add(text.rstrip("/"))
    return paths


def _expand(token: str) -> Iterator[str]:
    """``a/{b,c}`` as ``a/b`` and ``a/c``."""
    match = re.search(r"\{([^{}]*)\}", token)
    if match is None:
        yield token
        return
    for choice in match.group(1).split(","):
        yield from _expand(token[:match.start()] + choice + token[match.end():])


def doc_paths() -> List[str]:
    """Every path the page writes in backquotes, brace lists expanded."""
    text = re.sub(r"```.*?```", "", DOC.read_text(), flags=re.S)  # the pictures are no list
    return [p.rstrip("/") for token in re.findall(r"`([^`]+)`", text)
            if token.startswith("/") for p in _expand(token)]


def _documented(path: str, documented: List[str]) -> bool:
    """Whether the page names ``path``, or a folder of files it names (``.../policyN/``)."""
    pattern = PLACE.join(re.escape(part) for part in re.split(r"\{\}|\*", path))
    # "/boot/config-" + release is written out as the prefix it tests
    return any(re.fullmatch(pattern, p) or re.fullmatch(pattern + "/.+", p) or
               (path.endswith("-") and p.startswith(path)) for p in documented)


def test_the_page_names_every_path_the_facts_read() -> None:
    documented = doc_paths()
    missing = sorted(p for p in code_paths() if not _documented(p, documented))
    assert not missing, f"docs/capture-layout.md does not name {missing}"


def test_the_check_finds_the_paths_it_should() -> None:
    # the scan itself: a few paths that are built, not written out, must be among them
    paths = code_paths()
    assert {"/boot/config-{}", "/proc/config.gz", "/sys/devices/system/cpu/present",
            "/sys/devices/system/cpu/cpu{}/cpufreq", "/proc/ppc64/lparcfg"} <= paths


def _bundle_names(tmp_path: Path, root: Path) -> Set[str]:
    bundle = tmp_path / f"{root.name}.tar.gz"
    written = run_cli(["report", "--root", str(root), "--bundle", str(bundle), "--no-redact"])
    assert written.exit_code == 0, written.stderr
    with tarfile.open(bundle) as tar:
        return {name[len(TOP):] for name in tar.getnames() if name.startswith(TOP + "/")}


CPU = "/sys/devices/system/cpu"
NODE = "/sys/devices/system/node"


@pytest.mark.parametrize("host, wanted", [
    ("percpu-cpufreq", [f"{CPU}/cpu0/cpufreq/scaling_governor", f"{CPU}/present"]),
    ("cpu-isolated", [f"{CPU}/isolated", f"{CPU}/nohz_full", f"{CPU}/present"]),
    ("rt-isolcpus", ["/etc/systemd/system.conf", f"{CPU}/isolated", f"{CPU}/nohz_full"]),
    ("cpu-links-only", [f"{NODE}/node0/cpu0"]),
    ("arm64-neoverse-n1", [f"{NODE}/has_memory"]),
])
def test_a_bundle_carries_what_the_odd_captures_show(tmp_path: Path, host: str, wanted: List[str]) -> None:
    root = copy_host(host, tmp_path / host)
    names = _bundle_names(tmp_path, root)
    assert [p for p in wanted if p not in names] == []


def test_a_bundle_carries_the_kernel_config_and_the_lpar_files(tmp_path: Path) -> None:
    # pseries-lpar has no numa_balancing sysctl, so the kernel's config says its default
    root = copy_host("pseries-lpar", tmp_path / "lpar")
    release = (root / "proc/sys/kernel/osrelease").read_text().strip()
    (root / "boot").mkdir()
    (root / f"boot/config-{release}").write_text("CONFIG_NUMA_BALANCING=y\n"
                                                "CONFIG_NUMA_BALANCING_DEFAULT_ENABLED=y\n")
    (root / "proc/ppc64").mkdir(exist_ok=True)
    (root / "proc/ppc64/lparcfg").write_text("lparcfg 1.9\nshared_processor_mode=1\n")
    assert (root / "proc/device-tree").is_symlink()
    (root / "proc/device-tree/hypervisor").mkdir(parents=True, exist_ok=True)
    (root / "proc/device-tree/hypervisor/compatible").write_bytes(b"linux,kvm\0")
    (root / "proc/device-tree/hmc-managed?").write_bytes(b"")
    names = _bundle_names(tmp_path, root)
    # /proc/device-tree is the kernel's link to /sys/firmware/devicetree/base: the bundle
    # keeps the link and carries the files where it points
    base = "/sys/firmware/devicetree/base"
    wanted = [f"/boot/config-{release}", "/proc/ppc64/lparcfg", "/proc/device-tree",
              f"{base}/hypervisor/compatible", f"{base}/hmc-managed?"]
    assert [p for p in wanted if p not in names] == []


def test_a_bundle_carries_proc_config_gz_byte_for_byte(tmp_path: Path) -> None:
    root = copy_host("pseries-lpar", tmp_path / "gz")
    data = gzip.compress(b"CONFIG_NUMA_BALANCING=y\nCONFIG_NUMA_BALANCING_DEFAULT_ENABLED=y\n", mtime=0)
    (root / "proc/config.gz").write_bytes(data)
    bundle = tmp_path / "gz.tar.gz"
    assert run_cli(["report", "--root", str(root), "--bundle", str(bundle), "--no-redact"]).exit_code == 0
    with tarfile.open(bundle) as tar:
        member = tar.extractfile(f"{TOP}/proc/config.gz")
        assert member is not None and member.read() == data

#!/usr/bin/env python3
"""Build, cache and boot the real-kernel test guest.

The guest is Debian's kernel plus a Debian root file system made by debootstrap,
booted straight from an initramfs with systemd as ``/init`` under QEMU's software
emulation (TCG).  Nothing but Debian's packages and this project goes into it.

* The **base image** (kernel + root file system as an uncompressed cpio) depends only
  on the package list and the recipe in this file; it is cached outside the
  repository in ``$STRATA_VM_CACHE`` (default ``~/.cache/strata-doctor-vm``) under a
  hash of those inputs and rebuilt only when they change.
* The **payload** is a small cpio appended to the base for each boot: the project,
  built from the working tree, the list of steps to run and any test helpers.
* A oneshot unit runs the steps (``guest_runner.py``), sends ``/out`` back as a base64
  tar on the second serial port, and powers the guest off.  The first serial port is
  the guest console, kept as ``console.log``.

Command line (for running by hand)::

    python3 tests/vm/guest.py build            # build or reuse the base image
    python3 tests/vm/guest.py run seed -- 'strata-doctor check --format json'
"""

from __future__ import annotations

import argparse
import base64
import gzip
import hashlib
import io
import json
import os
import re
import shlex
import shutil
import stat
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Set, Tuple

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
sys.path.insert(0, str(HERE))

from topologies import TOPOLOGIES, Topology  # noqa: E402

SUITE = os.environ.get("STRATA_VM_SUITE", "bookworm")
def apt_mirror() -> str:
    """The Debian mirror apt uses on this machine (its first non-security source), so the
    guest comes from where this machine's own packages come from; '' when none is set."""
    sources = Path("/etc/apt/sources.list.d")
    for path in sorted(sources.glob("*.sources")) if sources.is_dir() else []:
        for line in path.read_text(errors="replace").splitlines():
            if line.startswith("URIs:"):
                for uri in line.split()[1:]:
                    if "security" not in uri:
                        return uri.rstrip("/")
    listing = Path("/etc/apt/sources.list")
    for line in listing.read_text(errors="replace").splitlines() if listing.is_file() else []:
        words = [w for w in line.split() if not w.startswith("[")]
        if len(words) >= 3 and words[0] == "deb" and "security" not in words[1]:
            return words[1].rstrip("/")
    return ""


MIRROR = os.environ.get("STRATA_VM_MIRROR") or apt_mirror()
PACKAGES = (
    "systemd",
    "systemd-oomd",
    "dbus",
    "python3",
    "python3-click",
    "python3-psutil",
    "python3-yaml",
    "python3-jinja2",
    "numactl",
    "kmod",
    "procps",
    "util-linux",
    "linux-image-amd64",
)
# Bump when the recipe below changes in a way the hash of its inputs cannot see.
# 2: the kernel modules in MODULES are kept (with depmod's index), not every module dropped.
RECIPE_VERSION = 2
KERNEL_ARGS = (
    "console=ttyS0,115200",
    "rdinit=/init",
    "panic=-1",
    "loglevel=4",
    "mitigations=off",
    "systemd.show_status=auto",
    "systemd.unit=multi-user.target",
)
# Units that only slow the boot or wait on a console.
MASKED_UNITS = (
    "systemd-firstboot.service",
    "getty@tty1.service",
    "serial-getty@ttyS0.service",
    "serial-getty@ttyS1.service",
    "console-getty.service",
    "apt-daily.timer",
    "apt-daily-upgrade.timer",
    "dpkg-db-backup.timer",
    "e2scrub_all.timer",
    "e2scrub_reap.service",
    "fstrim.timer",
    "systemd-pstore.service",
    "systemd-tmpfiles-clean.timer",
)
# The kernel modules kept in the image, with the modules they depend on; every other
# module is dropped. loop: the guest has no disk, so swap is a file on tmpfs behind a
# loop device (test_vm_limits.py); a swap file on tmpfs itself cannot be swapped on.
MODULES = ("loop",)
PRUNE = (
    "boot",
    "usr/share/doc",
    "usr/share/man",
    "usr/share/info",
    "usr/share/locale",
    "var/cache/apt",
    "var/lib/apt/lists",
    "var/cache/debconf/templates.dat-old",
)
RUNNER_UNIT = """\
[Unit]
Description=strata-doctor test bed runner
After=multi-user.target dbus.service systemd-oomd.service
Wants=dbus.service

[Service]
Type=oneshot
ExecStart=/usr/bin/python3 /strata-test/runner.py
StandardOutput=journal+console
StandardError=journal+console
FailureAction=poweroff-force
TimeoutStartSec=infinity

[Install]
WantedBy=multi-user.target
"""
BEGIN = b"===STRATA-VM-RESULT-BEGIN==="
END = b"===STRATA-VM-RESULT-END==="

Log = Callable[[str], None]


def cache_dir() -> Path:
    base = os.environ.get("STRATA_VM_CACHE") or os.path.join(
        os.path.expanduser("~"), ".cache", "strata-doctor-vm"
    )
    return Path(base)


def _stderr(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- image


@dataclass(frozen=True)
class Image:
    """A built base image: the kernel, the root file system cpio and what made them."""

    directory: Path
    kernel: Path
    rootfs: Path
    meta: Dict[str, str]


def image_key() -> str:
    """Hash of everything that goes into the base image."""
    h = hashlib.sha256()
    inputs = {
        "suite": SUITE,
        "mirror": MIRROR,
        "packages": sorted(PACKAGES),
        "recipe": RECIPE_VERSION,
        "masked": sorted(MASKED_UNITS),
        "prune": sorted(PRUNE),
        "modules": sorted(MODULES),
        "unit": RUNNER_UNIT,
    }
    h.update(json.dumps(inputs, sort_keys=True).encode())
    return h.hexdigest()[:16]


def find_image() -> Optional[Image]:
    d = cache_dir() / f"image-{image_key()}"
    meta_path = d / "image.json"
    if not meta_path.is_file():
        return None
    meta = json.loads(meta_path.read_text())
    return Image(d, d / "vmlinuz", d / "rootfs.cpio", meta)


def _run(cmd: Sequence[str], log: Log, **kw: object) -> None:
    log("+ " + " ".join(cmd))
    subprocess.run(list(cmd), check=True, **kw)  # type: ignore[call-overload]


def _privileged() -> List[str]:
    """How to run debootstrap and cpio as root: directly, or via passwordless sudo."""
    if os.geteuid() == 0:
        return []
    if shutil.which("sudo") and subprocess.run(
        ["sudo", "-n", "true"], capture_output=True
    ).returncode == 0:
        return ["sudo", "-n"]
    raise RuntimeError("building the guest needs root (debootstrap): run as root or allow sudo -n")


def build_image(log: Log = _stderr, force: bool = False) -> Image:
    """Build the base image unless a cached one with the same inputs exists."""
    existing = find_image()
    if existing and not force:
        log(f"guest image: cached at {existing.directory}")
        return existing
    for tool in ("debootstrap", "cpio"):
        if not shutil.which(tool):
            raise RuntimeError(f"building the guest needs {tool} (apt-get install {tool})")
    sudo = _privileged()
    key = image_key()
    final = cache_dir() / f"image-{key}"
    cache_dir().mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f"build-{key}-", dir=cache_dir()))
    root = work / "root"
    started = time.monotonic()
    try:
        _run(
            [*sudo, "debootstrap", "--variant=minbase", "--include=" + ",".join(PACKAGES),
             SUITE, str(root), MIRROR],
            log,
            stdout=subprocess.DEVNULL,
        )
        t_debootstrap = time.monotonic() - started
        kernels = sorted((root / "boot").glob("vmlinuz-*"))
        if not kernels:
            raise RuntimeError("debootstrap installed no kernel under /boot")
        kernel_release = kernels[-1].name[len("vmlinuz-"):]
        shutil.copyfile(kernels[-1], work / "vmlinuz")
        python_version = subprocess.run(
            [*sudo, "chroot", str(root), "python3", "-c",
             "import sys; print('%d.%d' % sys.version_info[:2])"],
            check=True, capture_output=True, text=True,
        ).stdout.strip()
        systemd_version = subprocess.run(
            [*sudo, "chroot", str(root), "dpkg-query", "-W", "-f=${Version}", "systemd"],
            check=True, capture_output=True, text=True,
        ).stdout.strip()
        modules = _keep_modules(root, sudo, kernel_release, log)
        _customise(root, sudo, log)
        log("packing root file system")
        with open(work / "rootfs.cpio", "wb") as out:
            find = subprocess.Popen(
                [*sudo, "find", ".", "-mindepth", "1"], cwd=root, stdout=subprocess.PIPE
            )
            subprocess.run(
                [*sudo, "cpio", "--quiet", "-o", "-H", "newc"],
                cwd=root, stdin=find.stdout, stdout=out, check=True,
            )
            if find.wait() != 0:
                raise RuntimeError("find failed while packing the root file system")
        meta = {
            "key": key,
            "suite": SUITE,
            "mirror": MIRROR,
            "kernel": kernel_release,
            "python": python_version,
            "systemd": systemd_version,
            "modules": " ".join(modules),
            "build_seconds": f"{time.monotonic() - started:.0f}",
            "debootstrap_seconds": f"{t_debootstrap:.0f}",
            "rootfs_bytes": str((work / "rootfs.cpio").stat().st_size),
        }
        (work / "image.json").write_text(json.dumps(meta, indent=1) + "\n")
        _remove_tree(root, sudo)
        if final.exists():
            shutil.rmtree(final)
        work.rename(final)
        log(f"guest image: built in {meta['build_seconds']} s at {final}")
    finally:
        if work.exists():
            _remove_tree(work, sudo)
    image = find_image()
    assert image is not None
    return image


def _remove_tree(path: Path, sudo: List[str]) -> None:
    """Remove a build tree, unmounting first whatever an interrupted debootstrap left."""
    prefix = str(path.resolve()) + "/"
    with open("/proc/mounts", encoding="utf-8") as f:
        mounts = [line.split()[1] for line in f if line.split()[1].startswith(prefix)]
    for mnt in sorted(mounts, key=len, reverse=True):
        subprocess.run([*sudo, "umount", "-l", mnt], check=False)
    subprocess.run([*sudo, "rm", "-rf", "--one-file-system", str(path)], check=False)


def _keep_modules(root: Path, sudo: List[str], release: str, log: Log) -> List[str]:
    """Drop every kernel module but MODULES and what they depend on, then rebuild the
    module index (depmod) so that ``modprobe`` finds the kept ones in the guest.

    Returns how each wanted module is present: ``loop`` (kept as a module), ``loop
    (built in)``; a module the kernel has in neither form is left out, and the test that
    needs it says so."""
    keep: List[str] = []
    present: List[str] = []
    for name in MODULES:
        shown = subprocess.run(
            [*sudo, "chroot", str(root), "modprobe", "--set-version", release,
             "--show-depends", name],
            capture_output=True, text=True, check=False,
        )
        lines = [line.split() for line in shown.stdout.splitlines() if line.strip()]
        files = [words[1] for words in lines if words[0] == "insmod" and len(words) > 1]
        if files:
            present.append(name)
        elif any(words[:1] == ["builtin"] for words in lines):
            present.append(f"{name} (built in)")
        else:
            log(f"guest image: the kernel {release} has no module {name!r}: "
                f"{shown.stderr.strip() or 'modprobe found nothing'}")
        # Relative to /lib/modules/RELEASE, whichever of /lib and /usr/lib modprobe names.
        keep += [f.split(f"/modules/{release}/", 1)[-1] for f in files]
    spare = " ".join(f"! -path {shlex.quote('./' + k)}" for k in sorted(set(keep)))
    script = [
        "set -e",
        "cd \"$1/lib/modules/$2\"",
        f"find . -type f -name '*.ko*' {spare} -delete",
        "find . -depth -mindepth 1 -type d -empty -delete",
        "chroot \"$1\" depmod \"$2\"",
    ]
    log(f"+ modules: keep {', '.join(sorted(set(keep))) or 'none'}; depmod {release}")
    subprocess.run([*sudo, "bash", "-c", "\n".join(script), "modules", str(root), release],
                   check=True)
    return present


def _customise(root: Path, sudo: List[str], log: Log) -> None:
    """Turn the debootstrap tree into an initramfs that boots into the runner."""
    log("customising root file system")
    staging = Path(tempfile.mkdtemp(prefix="staging-", dir=root.parent))
    (staging / "strata-vm-runner.service").write_text(RUNNER_UNIT)
    script = [
        "set -e",
        "cd \"$1\"",
        *[f"rm -rf ./{p}" for p in PRUNE],
        "ln -sf /lib/systemd/systemd init",
        "echo strata-vm > etc/hostname",
        "printf '127.0.0.1 localhost strata-vm\\n' > etc/hosts",
        "install -m 0644 \"$2/strata-vm-runner.service\" etc/systemd/system/",
        "mkdir -p etc/systemd/system/multi-user.target.wants out",
        "ln -sf /etc/systemd/system/strata-vm-runner.service "
        "etc/systemd/system/multi-user.target.wants/strata-vm-runner.service",
        *[f"ln -sf /dev/null etc/systemd/system/{u}" for u in MASKED_UNITS],
        "rm -f etc/systemd/system/getty.target.wants/getty@tty1.service",
        "mkdir -p etc/systemd/journald.conf.d",
        "printf '[Journal]\\nStorage=volatile\\nForwardToConsole=no\\n' "
        "> etc/systemd/journald.conf.d/10-strata-vm.conf",
        "mkdir -p dev/hugepages mnt/huge",
    ]
    log("+ customise: prune, /init -> systemd, runner unit, masks")
    subprocess.run([*sudo, "bash", "-c", "\n".join(script), "customise", str(root), str(staging)],
                   check=True)
    shutil.rmtree(staging)


# ------------------------------------------------------------------------- payload


class Cpio:
    """A minimal writer for the newc cpio format the kernel unpacks as an initramfs."""

    def __init__(self) -> None:
        self.buf = io.BytesIO()
        self.ino = 1000
        self.dirs: Set[str] = set()

    def _entry(self, name: str, mode: int, data: bytes = b"") -> None:
        self.ino += 1
        name_b = name.encode() + b"\0"
        fields = [self.ino, mode, 0, 0, 1, 0, len(data), 0, 0, 0, 0, len(name_b), 0]
        header = b"070701" + b"".join(b"%08X" % v for v in fields)
        self.buf.write(header + name_b)
        self.buf.write(b"\0" * (-(len(header) + len(name_b)) % 4))
        self.buf.write(data)
        self.buf.write(b"\0" * (-len(data) % 4))

    def mkdir(self, name: str) -> None:
        parts = name.strip("/").split("/")
        for i in range(1, len(parts) + 1):
            d = "/".join(parts[:i])
            if d and d not in self.dirs:
                self.dirs.add(d)
                self._entry(d, stat.S_IFDIR | 0o755)

    def add(self, name: str, data: bytes, mode: int = 0o644) -> None:
        name = name.strip("/")
        if "/" in name:
            self.mkdir(name.rsplit("/", 1)[0])
        self._entry(name, stat.S_IFREG | mode, data)

    def symlink(self, name: str, target: str) -> None:
        name = name.strip("/")
        if "/" in name:
            self.mkdir(name.rsplit("/", 1)[0])
        self._entry(name, stat.S_IFLNK | 0o777, target.encode())

    def finish(self) -> bytes:
        self._entry("TRAILER!!!", 0)
        data = self.buf.getvalue()
        return data + b"\0" * (-len(data) % 512)


_SKIP_PARTS = {".git", "tests", "build", "dist", "__pycache__", ".mypy_cache",
               ".pytest_cache", ".ruff_cache", ".venv", "venv"}


def source_tree() -> Path:
    """The project tree installed into the guest: this checkout, or $STRATA_VM_SOURCE
    (for instance a copy with a deliberately broken template, to see the tests fail)."""
    return Path(os.environ.get("STRATA_VM_SOURCE") or REPO)


def _copy_source(dest: Path) -> None:
    tree = source_tree()
    for path in tree.rglob("*"):
        rel = path.relative_to(tree)
        if any(p in _SKIP_PARTS or p.endswith(".egg-info") for p in rel.parts):
            continue
        target = dest / rel
        if path.is_dir():
            target.mkdir(parents=True, exist_ok=True)
        elif path.is_file():
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, target)


def _package_dirs(pyproject: str) -> Dict[str, str]:
    """The ``[tool.setuptools] package-dir`` mapping (import name -> folder)."""
    m = re.search(r"^package-dir\s*=\s*\{([^}]*)\}", pyproject, re.M)
    if not m:
        return {"strata_doctor": "doctor", "strata_doctor.checks": "checks"}
    return dict(re.findall(r'"([\w.]+)"\s*=\s*"([^"]+)"', m.group(1)))


def project_files(python: str, log: Log = _stderr) -> Dict[str, Tuple[bytes, int]]:
    """The project as installed files for the guest: {path: (content, mode)}.

    Built as a wheel from a copy of the working tree (so no build output lands in
    the tree) and unpacked into the guest's ``/usr/local/lib/pythonX.Y/dist-packages``
    with a ``strata-doctor`` console script.  If the wheel cannot be built (the
    packaging metadata is incomplete), the package folders are copied as the
    ``package-dir`` mapping says and the fallback is logged.
    """
    site = f"usr/local/lib/python{python}/dist-packages"
    files: Dict[str, Tuple[bytes, int]] = {}
    with tempfile.TemporaryDirectory(prefix="strata-vm-src-") as tmp:
        src = Path(tmp) / "src"
        _copy_source(src)
        wheel_dir = Path(tmp) / "wheel"
        proc = subprocess.run(
            [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
             "--no-index", "-q", "-w", str(wheel_dir), str(src)],
            capture_output=True, text=True,
        )
        wheels = sorted(wheel_dir.glob("*.whl")) if proc.returncode == 0 else []
        if wheels:
            with zipfile.ZipFile(wheels[0]) as whl:
                for info in whl.infolist():
                    if not info.is_dir():
                        files[f"{site}/{info.filename}"] = (whl.read(info), 0o644)
                scripts = {
                    n: s for n, s in _entry_points(whl).items() if n == "strata-doctor"
                }
        else:
            why = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["?"]
            log(f"guest: no wheel of the project ({why[0].strip()}); copying its packages")
            mapping = _package_dirs((src / "pyproject.toml").read_text())
            for name, folder in mapping.items():
                for path in sorted((src / folder).rglob("*")):  # sub-packages too
                    if path.is_file() and "__pycache__" not in path.parts:
                        rel = path.relative_to(src / folder).as_posix()
                        files[f"{site}/{name.replace('.', '/')}/{rel}"] = (path.read_bytes(), 0o644)
            scripts = {"strata-doctor": "strata_doctor.cli:main"}
    for name, target in scripts.items():
        module, func = target.split(":")
        files[f"usr/local/bin/{name}"] = (
            (
                "#!/usr/bin/python3\nimport sys\n"
                f"from {module} import {func}\n"
                f"sys.exit({func}())\n"
            ).encode(),
            0o755,
        )
    return files


def _entry_points(whl: zipfile.ZipFile) -> Dict[str, str]:
    names = [n for n in whl.namelist() if n.endswith(".dist-info/entry_points.txt")]
    if not names:
        return {"strata-doctor": "strata_doctor.cli:main"}
    section = ""
    scripts: Dict[str, str] = {}
    for line in whl.read(names[0]).decode().splitlines():
        line = line.strip()
        if line.startswith("["):
            section = line.strip("[]")
        elif "=" in line and section == "console_scripts":
            k, v = line.split("=", 1)
            scripts[k.strip()] = v.strip()
    return scripts or {"strata-doctor": "strata_doctor.cli:main"}


@dataclass
class Step:
    """One command to run in the guest, in bash, with ``$OUT`` for files to bring back."""

    name: str
    cmd: str
    timeout: int = 300


@dataclass
class Payload:
    """What one boot runs: the steps plus extra files (path in the guest -> content)."""

    steps: List[Step]
    files: Dict[str, Tuple[bytes, int]] = field(default_factory=dict)


def build_payload(payload: Payload, python: str, log: Log = _stderr) -> bytes:
    cpio = Cpio()
    for path, (data, mode) in sorted(project_files(python, log).items()):
        cpio.add(path, data, mode)
    for path, (data, mode) in sorted(payload.files.items()):
        cpio.add(path, data, mode)
    steps = [{"name": s.name, "cmd": s.cmd, "timeout": s.timeout} for s in payload.steps]
    cpio.add("strata-test/steps.json", json.dumps(steps, indent=1).encode())
    cpio.add("strata-test/runner.py", (HERE / "guest_runner.py").read_bytes(), 0o755)
    return gzip.compress(cpio.finish(), compresslevel=6)


# ---------------------------------------------------------------------------- boot


@dataclass
class StepResult:
    name: str
    cmd: str
    rc: int
    stdout: str
    stderr: str
    seconds: float

    def json(self) -> object:
        """The step's stdout parsed as JSON (raises with the step's output on failure)."""
        try:
            return json.loads(self.stdout)
        except ValueError as exc:
            raise AssertionError(
                f"step {self.name!r} (rc {self.rc}) did not print JSON: {exc}\n"
                f"--- stdout ---\n{self.stdout[-3000:]}\n--- stderr ---\n{self.stderr[-3000:]}"
            ) from exc

    def describe(self) -> str:
        return (
            f"step {self.name!r}: {self.cmd}\nrc={self.rc} in {self.seconds}s\n"
            f"--- stdout ---\n{self.stdout[-4000:]}\n--- stderr ---\n{self.stderr[-4000:]}"
        )


@dataclass
class BootResult:
    """What came back from one boot; ``artifacts`` holds the console log and /out."""

    topology: Topology
    artifacts: Path
    steps: Dict[str, StepResult]
    info: Dict[str, object]
    wall_seconds: float
    qemu_rc: Optional[int]
    error: Optional[str] = None

    def step(self, name: str) -> StepResult:
        if self.error:
            raise AssertionError(f"{self.topology.name} guest failed: {self.error} "
                                 f"(console: {self.artifacts / 'console.log'})")
        if name not in self.steps:
            raise AssertionError(f"step {name!r} did not run in the {self.topology.name} guest "
                                 f"(console: {self.artifacts / 'console.log'})")
        return self.steps[name]

    def file(self, rel: str) -> Path:
        return self.artifacts / "out" / "files" / rel


def boot(
    topology: Topology,
    payload: Payload,
    artifacts: Path,
    image: Optional[Image] = None,
    timeout: float = 900,
    log: Log = _stderr,
) -> BootResult:
    """Boot one guest with ``topology``, run ``payload`` and collect what comes back."""
    image = image or build_image(log)
    artifacts.mkdir(parents=True, exist_ok=True)
    initrd = artifacts / "initrd.cpio"
    with open(initrd, "wb") as out:
        with open(image.rootfs, "rb") as base:
            shutil.copyfileobj(base, out, 1 << 20)
        out.write(build_payload(payload, image.meta["python"], log))
    console = artifacts / "console.log"
    result_port = artifacts / "serial1.txt"
    for p in (console, result_port):
        p.unlink(missing_ok=True)
    cmd = [
        "qemu-system-x86_64",
        "-nodefaults", "-no-user-config", "-display", "none", "-no-reboot",
        "-monitor", "none",
        *topology.qemu_args(),
        "-kernel", str(image.kernel),
        "-initrd", str(initrd),
        "-append", " ".join((*KERNEL_ARGS, *topology.extra_kernel_args)),
        "-serial", f"file:{console}",
        "-serial", f"file:{result_port}",
    ]
    (artifacts / "qemu-cmdline.txt").write_text(" ".join(cmd) + "\n")
    log(f"booting {topology.name} guest (artifacts in {artifacts})")
    started = time.monotonic()
    error: Optional[str] = None
    qemu_rc: Optional[int] = None
    with open(artifacts / "qemu.log", "wb") as qlog:
        proc = subprocess.Popen(cmd, stdout=qlog, stderr=subprocess.STDOUT)
        try:
            qemu_rc = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            error = f"guest did not power off within {timeout:.0f} s"
        finally:
            if proc.poll() is None:  # timed out, or interrupted: never leave QEMU behind
                proc.kill()
                proc.wait()
    wall = time.monotonic() - started
    initrd.unlink()
    steps: Dict[str, StepResult] = {}
    info: Dict[str, object] = {}
    raw = result_port.read_bytes() if result_port.exists() else b""
    if BEGIN in raw and END in raw.split(BEGIN, 1)[1]:
        body = raw.split(BEGIN, 1)[1].split(END, 1)[0]
        data = base64.b64decode(body)
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
            _extract(tar, artifacts)
        results = json.loads((artifacts / "out" / "results.json").read_text())
        info = results["info"]
        for s in results["steps"]:
            steps[s["name"]] = StepResult(**s)
            (artifacts / "steps").mkdir(exist_ok=True)
            (artifacts / "steps" / f"{s['name']}.txt").write_text(steps[s["name"]].describe())
    elif error is None:
        error = f"no results on the result port (qemu exit {qemu_rc})"
    log(f"{topology.name} guest: {wall:.0f} s wall, runner started at "
        f"{info.get('uptime_at_start', '?')} s guest uptime"
        + (f"; ERROR {error}" if error else ""))
    return BootResult(topology, artifacts, steps, info, wall, qemu_rc, error)


def _extract(tar: tarfile.TarFile, dest: Path) -> None:
    for member in tar.getmembers():
        target = (dest / member.name).resolve()
        if not str(target).startswith(str(dest.resolve())) or member.issym() or member.islnk():
            continue
        if member.isdir():
            target.mkdir(parents=True, exist_ok=True)
        elif member.isfile():
            target.parent.mkdir(parents=True, exist_ok=True)
            src = tar.extractfile(member)
            if src is not None:
                target.write_bytes(src.read())


# ----------------------------------------------------------------------------- cli


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="build (or reuse) the cached base image")
    b.add_argument("--force", action="store_true", help="rebuild even when cached")
    sub.add_parser("key", help="print the base image's cache key")
    sub.add_parser("mirror", help="print the Debian mirror the image is built from")
    r = sub.add_parser("run", help="boot a topology and run shell commands in it")
    r.add_argument("topology", choices=sorted(TOPOLOGIES))
    r.add_argument("commands", nargs="+", help="bash commands, one step each")
    r.add_argument("--artifacts", type=Path, default=None)
    r.add_argument("--timeout", type=float, default=900)
    args = parser.parse_args(argv)
    if args.command == "mirror":
        print(MIRROR)
        return 0 if MIRROR else 1
    if args.command == "key":
        print(image_key())
        return 0
    if args.command == "build":
        image = build_image(force=args.force)
        print(json.dumps({"directory": str(image.directory), **image.meta}, indent=1))
        return 0
    artifacts = args.artifacts or Path(tempfile.mkdtemp(prefix=f"strata-vm-{args.topology}-"))
    steps = [Step(f"cmd{i}", c) for i, c in enumerate(args.commands)]
    res = boot(TOPOLOGIES[args.topology], Payload(steps), artifacts, timeout=args.timeout)
    for s in res.steps.values():
        print(s.describe())
    print(f"artifacts: {artifacts}")
    return 1 if res.error else 0


if __name__ == "__main__":
    sys.exit(main())

"""A fresh minimal Debian as a chroot, for running README.md's set-up commands in it.

``debootstrap --variant=minbase`` of Debian (bookworm unless ``$STRATA_VM_SUITE`` says
otherwise): no python3, no sudo, no git, as a new user's server has. The tree is cached as
a tar beside the guest images (``$STRATA_VM_CACHE``) under a hash of what made it, and
unpacked fresh for every run. This machine's network settings are copied in (name
resolution, apt's proxy, pip's configuration and the local CA certificates) so that apt
and pip inside reach the mirrors this machine reaches.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import ssl
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Sequence

from guest import MIRROR, REPO, SUITE, Log, _remove_tree, _stderr, cache_dir

# Bump when the recipe below changes in a way the hash of its inputs cannot see.
RECIPE_VERSION = 1
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
USER_UID = 1000
# What this machine uses to reach its mirrors; copied into the chroot when present.
NETWORK_FILES = ("etc/resolv.conf", "etc/hosts", "etc/pip.conf", "etc/ssl/certs/ca-certificates.crt")
NETWORK_FOLDERS = ("etc/xdg/pip", "usr/local/share/ca-certificates")
NETWORK_ENV = ("http_proxy", "https_proxy", "no_proxy", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY",
               "PIP_INDEX_URL", "PIP_CERT", "PIP_DEFAULT_TIMEOUT")
PYPI = os.environ.get("PIP_INDEX_URL", "https://pypi.org/simple").rstrip("/") + "/pip/"


def chroot_key() -> str:
    """Hash of everything that goes into the cached tree."""
    inputs = {"suite": SUITE, "mirror": MIRROR, "variant": "minbase", "recipe": RECIPE_VERSION}
    return hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()[:16]


def cached_tarball() -> Path:
    return cache_dir() / f"minbase-{SUITE}-{chroot_key()}.tar"


def unreachable(url: str) -> Optional[str]:
    """Why ``url`` cannot be read from here (with this machine's CA certificates); None when it can."""
    bundle = os.environ.get("PIP_CERT") or os.environ.get("SSL_CERT_FILE")
    context = ssl.create_default_context(cafile=bundle if bundle and os.path.isfile(bundle) else None)
    try:
        with urllib.request.urlopen(url, timeout=15, context=context) as response:
            response.read(64)
    except Exception as exc:  # any failure to reach it is the reason to skip
        return f"{url}: {exc}"
    return None


def skip_reason() -> str:
    """Why the minimal-Debian test cannot run here; '' when it can."""
    if os.geteuid() != 0:
        return "the minimal-Debian set-up test needs root (debootstrap, chroot, mount)"
    if not cached_tarball().is_file() and not shutil.which("debootstrap"):
        return "no cached minimal Debian and no debootstrap to make one (apt-get install debootstrap)"
    if not MIRROR:
        return "no Debian mirror configured for apt (STRATA_VM_MIRROR)"
    for url in (f"{MIRROR}/dists/{SUITE}/Release", PYPI):
        why = unreachable(url)
        if why:
            return f"the set-up commands need the mirrors: {why}"
    return ""


def build_tarball(log: Log = _stderr) -> Path:
    """The cached minbase tree as a tar, made with debootstrap when it is not there yet."""
    final = cached_tarball()
    if final.is_file():
        log(f"minimal Debian: cached at {final}")
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="minbase-", dir=final.parent))
    started = time.monotonic()
    try:
        root = work / "root"
        log(f"+ debootstrap --variant=minbase {SUITE} {root} {MIRROR}")
        subprocess.run(["debootstrap", "--variant=minbase", SUITE, str(root), MIRROR],
                       check=True, stdout=subprocess.DEVNULL)
        subprocess.run(["tar", "-C", str(root), "-cf", str(work / "root.tar"), "."], check=True)
        (work / "root.tar").rename(final)
        log(f"minimal Debian: built in {time.monotonic() - started:.0f} s at {final}")
    finally:
        _remove_tree(work, [])
    return final


def unpack(tarball: Path, dest: Path) -> Path:
    """A fresh tree from the cached tar at ``dest``."""
    dest.mkdir(parents=True)
    subprocess.run(["tar", "-C", str(dest), "-xf", str(tarball)], check=True)
    return dest


def copy_network_config(root: Path) -> List[str]:
    """Copy this machine's network settings into the tree; returns what was copied."""
    copied: List[str] = []
    for rel in NETWORK_FILES:
        source = Path("/") / rel
        if source.is_file():
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).unlink(missing_ok=True)  # debootstrap's resolv.conf may be a link
            shutil.copyfile(source, root / rel)
            copied.append(rel)
    for rel in NETWORK_FOLDERS:
        source = Path("/") / rel
        if source.is_dir():
            shutil.copytree(source, root / rel, dirs_exist_ok=True)
            copied.append(rel + "/")
    apt_conf = Path("/etc/apt/apt.conf.d")
    for conf in sorted(apt_conf.glob("*")) if apt_conf.is_dir() else []:
        if conf.is_file() and "::proxy" in conf.read_text(errors="replace").lower():
            shutil.copyfile(conf, root / "etc/apt/apt.conf.d" / conf.name)
            copied.append(f"etc/apt/apt.conf.d/{conf.name}")
    return copied


def clone_files(repo: Path = REPO) -> List[str]:
    """The files a fresh clone of the working tree holds: tracked or new, never ignored."""
    listed = subprocess.run(
        ["git", "-C", str(repo), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        capture_output=True, text=True, check=True,
    ).stdout
    return sorted(name for name in listed.split("\0") if name and os.path.lexists(repo / name))


def add_user_clone(root: Path, files: Sequence[str], repo: Path = REPO) -> Path:
    """A user (uid 1000) whose home holds the clone as ``~/strata-doctor``, all theirs."""
    subprocess.run(["chroot", str(root), "useradd", "-m", "-u", str(USER_UID), "-s", "/bin/sh", "user"],
                   check=True)
    home = root / "home" / "user"
    clone = home / "strata-doctor"
    clone.mkdir()
    # tar copies 35,000 files (the fixture hosts) many times faster than a loop in Python,
    # and hands them, and their folders (listed first), to the user; links stay links.
    owner = [f"--owner={USER_UID}", f"--group={USER_UID}", "--numeric-owner"]
    pack = subprocess.Popen(
        ["tar", "-C", str(repo), "--null", "--no-recursion", "-T", "-", *owner, "-cf", "-"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE,
    )
    unpack_ = subprocess.Popen(["tar", "-C", str(clone), "--same-owner", "-xf", "-"], stdin=pack.stdout)
    assert pack.stdin is not None and pack.stdout is not None
    pack.stdout.close()
    folders = sorted({str(parent) for name in files for parent in Path(name).parents if str(parent) != "."})
    pack.stdin.write("".join(f"{name}\0" for name in [*folders, *files]).encode())
    pack.stdin.close()
    if pack.wait() != 0 or unpack_.wait() != 0:
        raise RuntimeError(f"copying the clone into {clone} failed")
    for path in (home, clone):
        os.lchown(path, USER_UID, USER_UID)
    return clone


@contextlib.contextmanager
def mounted(root: Path) -> Iterator[None]:
    """/proc and a private /dev/pts inside the tree for the duration; unmounted after."""
    points = [(["-t", "proc", "proc"], root / "proc"),
              (["-t", "devpts", "-o", "newinstance,ptmxmode=0666", "devpts"], root / "dev" / "pts")]
    done: List[Path] = []
    try:
        for args, point in points:
            point.mkdir(parents=True, exist_ok=True)
            subprocess.run(["mount", *args, str(point)], check=True)
            done.append(point)
        yield
    finally:
        for point in reversed(done):
            subprocess.run(["umount", str(point)], check=False)


def still_mounted(root: Path) -> List[str]:
    """Mount points at or below ``root``."""
    prefix = str(root.resolve())
    with open("/proc/mounts", encoding="utf-8") as f:
        points = [line.split()[1] for line in f]
    return [p for p in points if p == prefix or p.startswith(prefix + "/")]


def remove(root: Path) -> None:
    """Remove the tree, never through a mount left inside it."""
    left = still_mounted(root)
    if left:
        raise RuntimeError(f"not removing {root}: still mounted: {', '.join(left)}")
    subprocess.run(["rm", "-rf", "--one-file-system", str(root)], check=False)


def run_in(
    root: Path, command: str, cwd: str, user: bool, timeout: float
) -> subprocess.CompletedProcess[str]:
    """``sh -c command`` in the tree, as root or as the user, with a clean environment."""
    env: Dict[str, str] = {"PATH": PATH, "LANG": "C.UTF-8",
                           "HOME": "/home/user" if user else "/root"}
    env.update({k: os.environ[k] for k in NETWORK_ENV if k in os.environ})
    spec = [f"--userspec={USER_UID}:{USER_UID}"] if user else []
    argv = ["chroot", *spec, str(root), "env", "-i", *[f"{k}={v}" for k, v in env.items()],
            "sh", "-c", f"cd {cwd} && {command}"]
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)


def owned_by_others(clone: Path) -> List[str]:
    """Paths under the clone not owned by the user (what a root install must never leave)."""
    found = []
    for top, dirs, names in os.walk(clone):
        for name in [*dirs, *names]:
            path = os.path.join(top, name)
            if os.lstat(path).st_uid != USER_UID:
                found.append(os.path.relpath(path, clone))
    return sorted(found)


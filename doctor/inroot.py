"""Host paths resolved inside a root, the way ``openat2(..., RESOLVE_IN_ROOT)`` resolves them.

Under ``--root DIR`` the tree is input from another machine (a capture, an unpacked bundle,
an image prepared offline), so its symlinks must never lead out of it:

* an absolute link target is taken relative to the root (``sys -> /sys`` is ``DIR/sys``);
* ``..`` never climbs above the root (``etc/x -> ../../../y`` is ``DIR/y``);
* a chain of more than 40 links is ``ELOOP``, as in the kernel.

Two implementations give the same answers: ``openat2(2)`` with ``RESOLVE_IN_ROOT |
RESOLVE_NO_MAGICLINKS`` through ctypes, where the kernel has it (Linux 5.6+), and a
component-by-component walk otherwise: every step is an ``openat`` relative to the
directory descriptor reached so far, with ``O_NOFOLLOW``, and every link is read and
expanded here, so a link swapped in between two steps makes the open fail instead of
leading out. ``STRATA_DOCTOR_NO_OPENAT2=1`` forces the walk (it is what older kernels and
seccomp filters that hide ``openat2`` get).

The applier does every write, removal and ``chmod`` relative to a directory descriptor
opened here, by name, with ``O_NOFOLLOW``; :class:`~strata_doctor.root.Root` opens every
file under a captured root here, and lists, stats and reads links from a folder opened
here, so each read resolves its whole path inside the root in the call that opens it.
"""

from __future__ import annotations

import errno
import os
import stat
from typing import Any, Dict, List, Optional, Tuple

MAX_LINKS = 40
"""Links followed in one resolution before ``ELOOP``, the kernel's limit."""

_O_PATH = getattr(os, "O_PATH", 0)
_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_O_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_O_DIRECTORY = getattr(os, "O_DIRECTORY", 0)
_SYS_OPENAT2 = 437  # the same number on every Linux architecture
_RESOLVE_NO_MAGICLINKS = 0x02
_RESOLVE_IN_ROOT = 0x10

_openat2: Any = None  # None: not probed yet; False: unavailable; else the libc syscall function
_how_type: Any = None


def openat2_available() -> bool:
    """Whether this process resolves with ``openat2`` (False forces the portable walk)."""
    return _load_openat2() is not False


def use_openat2(enabled: bool) -> None:
    """Force the walk (``False``) or probe ``openat2`` again (``True``); for tests."""
    global _openat2
    _openat2 = None if enabled else False


def _load_openat2() -> Any:
    global _openat2, _how_type
    if _openat2 is not None:
        return _openat2
    if os.environ.get("STRATA_DOCTOR_NO_OPENAT2") == "1" or not _O_PATH:
        _openat2 = False
        return _openat2
    try:
        import ctypes

        class OpenHow(ctypes.Structure):
            _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]

        libc = ctypes.CDLL(None, use_errno=True)
        function = libc.syscall
        function.restype = ctypes.c_long
        _how_type = OpenHow
        _openat2 = function
        top = os.open("/", os.O_RDONLY | _O_DIRECTORY | _O_CLOEXEC)
        fd = _call_openat2(top, ".", _O_PATH, 0, close_dir=True)
        os.close(fd)
    except OSError as exc:
        if exc.errno not in (errno.ENOSYS, errno.EPERM, errno.EINVAL, errno.E2BIG):
            raise
        _openat2 = False
    except (ImportError, AttributeError):
        _openat2 = False
    return _openat2


_hows: Dict[Tuple[int, int], Tuple[Any, Any, Any]] = {}
"""The call's fixed arguments (number, ``open_how``, its size) per (flags, mode): every file
of the process scan is one openat2 call, so they are built once."""


def _call_openat2(dir_fd: int, rel: str, flags: int, mode: int, close_dir: bool = False) -> int:
    import ctypes

    args = _hows.get((flags, mode))
    if args is None:
        how = _how_type(flags | _O_CLOEXEC, mode, _RESOLVE_IN_ROOT | _RESOLVE_NO_MAGICLINKS)
        # Typed as the kernel reads them: a variadic syscall() takes no argtypes.
        args = (ctypes.c_long(_SYS_OPENAT2), ctypes.pointer(how), ctypes.c_size_t(ctypes.sizeof(how)))
        _hows[(flags, mode)] = args
    number, how, size = args
    try:
        for _ in range(16):  # EAGAIN: a concurrent rename raced ".."; the kernel asks to retry
            fd = int(_openat2(number, ctypes.c_int(dir_fd), os.fsencode(rel), how, size))
            if fd >= 0:
                return fd
            code = ctypes.get_errno()
            if code != errno.EAGAIN:
                raise OSError(code, os.strerror(code))
        raise OSError(errno.EAGAIN, os.strerror(errno.EAGAIN))
    finally:
        if close_dir:
            os.close(dir_fd)


def split(host_path: str) -> List[str]:
    """The components of a host path, without empty and ``.`` ones."""
    return [part for part in host_path.split("/") if part and part != "."]


def host_path(parts: List[str]) -> str:
    """``['etc', 'x']`` -> ``/etc/x``."""
    return "/" + "/".join(parts)


class InRoot:
    """A root directory, held open, and every host path resolved inside it."""

    def __init__(self, base: str | os.PathLike[str]) -> None:
        self.base = os.fspath(base)
        self.real = os.path.realpath(self.base)
        """The root's own real path on this machine."""
        self.fd = os.open(self.real, os.O_RDONLY | _O_DIRECTORY | _O_CLOEXEC)
        """A descriptor of the root directory; every resolution starts here."""

    def close(self) -> None:
        """Close the root's descriptor."""
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> InRoot:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- opening -------------------------------------------------------------
    def open(self, path: str, flags: int = os.O_RDONLY, follow_last: bool = True) -> int:
        """A descriptor of ``path`` resolved inside the root (``O_NOFOLLOW`` on the last
        component unless ``follow_last``); ``OSError`` names the host path."""
        if not follow_last:
            flags |= _O_NOFOLLOW
        try:
            if (_openat2 if _openat2 is not None else _load_openat2()) is not False:
                # RESOLVE_IN_ROOT takes an absolute path, "." and ".." inside the root itself.
                return _call_openat2(self.fd, path or ".", flags, 0)
            return _walk(self.fd, path, follow_last, flags, False)[0]
        except OSError as exc:
            raise OSError(exc.errno, exc.strerror, path) from None

    def open_dir(self, path: str) -> int:
        """A read-only descriptor of the folder ``path`` (links followed inside the root)."""
        return self.open(path, os.O_RDONLY | _O_DIRECTORY)

    # -- looking, by descriptor ------------------------------------------------
    # Each of these resolves the whole path inside the root in the call that opens it (the
    # folder for a name): nothing learnt of a folder earlier is trusted, so a folder swapped
    # for a link between two looks is taken inside the root like any other link.
    def listdir(self, path: str) -> List[str]:
        """The names in the folder ``path`` (links followed inside the root), unsorted."""
        fd = self.open_dir(path)
        try:
            return os.listdir(fd)
        finally:
            os.close(fd)

    def lstat(self, path: str, follow_last: bool = False) -> os.stat_result:
        """What ``path`` is: ``lstat`` of its name from its folder's descriptor, or with
        ``follow_last`` ``fstat`` of the file itself, a link there followed inside the root."""
        if follow_last:
            fd = self.open(path, _O_PATH or os.O_RDONLY)
            try:
                return os.fstat(fd)
            finally:
                os.close(fd)
        folder, name = self._parent(path)
        try:
            return os.stat(name, dir_fd=folder, follow_symlinks=False)
        except OSError as exc:
            raise OSError(exc.errno, exc.strerror, path) from None
        finally:
            os.close(folder)

    def readlink(self, path: str) -> str:
        """The target of the link ``path`` as written, read from its folder's descriptor."""
        folder, name = self._parent(path)
        try:
            return os.readlink(name, dir_fd=folder)
        except OSError as exc:
            raise OSError(exc.errno, exc.strerror, path) from None
        finally:
            os.close(folder)

    def _parent(self, path: str) -> Tuple[int, str]:
        """(a descriptor of the folder holding ``path``'s last component, opened inside the
        root; that component's name), or (the folder ``path`` itself, ``.``) when it ends in
        ``..`` or names the root: neither is ever a link."""
        parts = split(path)
        if not parts or parts[-1] == "..":
            return self.open(path, _O_PATH | _O_DIRECTORY), "."
        return self.open("/".join(parts[:-1]), _O_PATH | _O_DIRECTORY), parts[-1]

    def resolve(self, path: str, follow_last: bool = True) -> str:
        """The host path ``path`` names inside the root, with no link left in it (except the
        last component when not ``follow_last``). Components that do not exist are kept
        as written; ``OSError`` for a loop or a component that is not a folder."""
        try:
            return host_path(_walk(self.fd, path, follow_last, None, True)[1])
        except OSError as exc:
            raise OSError(exc.errno, exc.strerror, path) from None

    def host_of(self, fd: int) -> Optional[str]:
        """The host path of an open descriptor under this root, or None when unknown."""
        try:
            real = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            return None
        if real == self.real:
            return "/"
        prefix = self.real.rstrip("/") + "/"
        return "/" + real[len(prefix):] if real.startswith(prefix) else None

    def locate(self, path: str) -> Tuple[str, List[str]]:
        """(the deepest existing folder on the way to ``path``, resolved, and the components
        still missing below it, as written). A dangling link, a loop or a file in a
        folder's place is an ``OSError`` naming the component."""
        try:
            _, parts, existing = _walk(self.fd, path, True, None, True, strict_missing=True)
        except OSError as exc:
            raise OSError(exc.errno, exc.strerror, exc.filename or path) from None
        folder = host_path(parts[:existing])
        info = os.stat(folder.lstrip("/") or ".", dir_fd=self.fd, follow_symlinks=False)
        if not stat.S_ISDIR(info.st_mode):
            raise OSError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), folder)
        return folder, parts[existing:]


def _walk(root_fd: int, path: str, follow_last: bool, flags: Optional[int], missing_ok: bool,
          strict_missing: bool = False) -> Tuple[int, List[str], int]:
    """Resolve ``path`` from ``root_fd`` one component at a time.

    Returns (a descriptor opened with ``flags`` on the result, or -1 when ``flags`` is None or
    the result is missing and ``missing_ok``; the resolved components; how many of them
    exist). With ``strict_missing`` a missing component that came from a link's target (a
    dangling link) is an error naming the link: a folder is never created through one.
    """
    walk = _Walk(root_fd, path, follow_last, flags, missing_ok, strict_missing)
    try:
        return walk.run()
    finally:
        walk.close()


_Walked = Tuple[int, List[str], int]
"""What :func:`_walk` returns: a descriptor or -1, the resolved components, how many exist."""


class _Walk:
    """One resolution in progress: the components still to take, those taken, and a
    descriptor of each folder taken (the last one is where the next step starts)."""

    def __init__(self, root_fd: int, path: str, follow_last: bool, flags: Optional[int],
                 missing_ok: bool, strict_missing: bool) -> None:
        self.root_fd = root_fd
        self.follow_last = follow_last
        self.flags = flags
        self.missing_ok = missing_ok
        self.strict_missing = strict_missing
        self.queue = split(path)
        self.original = len(self.queue)  # the path's own components are always the queue's tail
        self.parts: List[str] = []
        self.fds: List[int] = []
        self.links = 0
        self.via_link = ""

    def close(self) -> None:
        """Close the descriptor of every folder taken."""
        for fd in self.fds:
            os.close(fd)

    def _cur(self) -> int:
        return self.fds[-1] if self.fds else self.root_fd

    def run(self) -> _Walked:
        """Take every component; the answer of the step that ends the walk early, else the
        folder reached."""
        while self.queue:
            done = self._step()
            if done is not None:
                return done
        if self.flags is None:  # the path named the root itself or a folder reached through ".."
            return -1, self.parts, len(self.parts)
        return os.open(".", self.flags | _O_CLOEXEC, dir_fd=self._cur()), self.parts, len(self.parts)

    def _step(self) -> Optional[_Walked]:
        """Take the next component; an answer when the walk ends there."""
        from_link = len(self.queue) > self.original
        name = self.queue.pop(0)
        if not from_link:
            self.original -= 1
        if name == "..":
            self._up()
            return None
        cur = self._cur()
        last = not self.queue
        try:
            info = os.stat(name, dir_fd=cur, follow_symlinks=False)
        except FileNotFoundError:
            return self._missing(name, from_link)
        if stat.S_ISLNK(info.st_mode) and (self.follow_last or not last):
            self._follow(name, cur)
            return None
        if last:
            return self._open_last(name, cur)
        self._descend(name, cur, info.st_mode)
        return None

    def _up(self) -> None:
        """``..``: back one folder, never above the root."""
        if self.parts:
            self.parts.pop()
            os.close(self.fds.pop())

    def _missing(self, name: str, from_link: bool) -> _Walked:
        """``name`` does not exist: the rest of the path as written, or the refusal."""
        if not self.missing_ok:
            raise OSError(errno.ENOENT, os.strerror(errno.ENOENT),
                          host_path([*self.parts, name])) from None
        if self.strict_missing and from_link:
            raise OSError(errno.ENOENT, "a symlink to something missing", self.via_link) from None
        existing = len(self.parts)
        for rest in [name, *self.queue]:  # nothing below a missing folder can be a link
            if rest != "..":
                self.parts.append(rest)
            elif len(self.parts) > existing:
                self.parts.pop()
            else:
                raise OSError(errno.ENOENT, os.strerror(errno.ENOENT),
                              host_path([*self.parts, name])) from None
        return -1, self.parts, existing

    def _follow(self, name: str, cur: int) -> None:
        """Put the target of the link ``name`` in its place; an absolute one starts again at
        the root."""
        self.links += 1
        if self.links > MAX_LINKS:
            raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), host_path([*self.parts, name]))
        target = os.readlink(name, dir_fd=cur)
        self.via_link = f"{host_path([*self.parts, name])} -> {target}"
        if target.startswith("/"):
            while self.fds:
                os.close(self.fds.pop())
            self.parts = []
        self.queue = split(target) + self.queue

    def _open_last(self, name: str, cur: int) -> _Walked:
        """The last component, opened with ``O_NOFOLLOW`` (or only named, without flags)."""
        self.parts.append(name)
        if self.flags is None:
            return -1, self.parts, len(self.parts)
        fd = os.open(name, self.flags | _O_NOFOLLOW | _O_CLOEXEC, dir_fd=cur)
        return fd, self.parts, len(self.parts)

    def _descend(self, name: str, cur: int, mode: int) -> None:
        """Into the folder ``name``, held open so the next step starts from it."""
        if not stat.S_ISDIR(mode):
            raise OSError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), host_path([*self.parts, name]))
        self.fds.append(os.open(name, (_O_PATH or os.O_RDONLY) | _O_DIRECTORY | _O_NOFOLLOW | _O_CLOEXEC,
                                dir_fd=cur))
        self.parts.append(name)

"""Who else may use a hugepage pool, before a fix gives it away (:func:`other_pool_users`).

``vm.nr_hugepages = 0`` ends the seed's trap, but a pool is often set for another
program: NEC SX-Aurora's VEOS maps it for the vector engines' DMA, a DPDK program for its
NICs' rings, a database for SysV SHM_HUGETLB segments. Those programs get their pages when
they start, so a pool released while they are stopped breaks their next start. Where the
host shows such a user, the fix leaves the pool alone unless the config opts in
(``release_pool: true``).
"""

from collections import Counter
from typing import List, NamedTuple, Optional, Tuple

from strata_doctor.facts.hugepages import Holder, HugepageFacts, format_page_size
from strata_doctor.facts.hugetlbfs import HugetlbfsMount
from strata_doctor.facts.parse import format_bytes, format_count
from strata_doctor.facts.pool_users import PoolDevice

ENGINE_MOUNT = "/dev/hugepages"
"""systemd's ``dev-hugepages.mount``, on every systemd host, where the engine keeps its
hugetlbfs files: its presence says nothing about another user."""


_KINDS = {"ve": ("NEC SX-Aurora vector engine", "NEC SX-Aurora vector engines"),
          "dpdk": ("NIC bound for DPDK", "NICs bound for DPDK")}
"""How each kind of device is named: one, several."""


OPT_IN = "release_pool: true"
"""The config line that lets ``fix`` release a pool others may use."""


def pool_held(users: "PoolUsers", opted_in: bool) -> bool:
    """Whether a fix leaves a pool alone: something else may use it and the config does not
    opt in. hugepages' fixes and oomd's trap chain both act on this one answer."""
    return users.any and not opted_in


class PoolUsers(NamedTuple):
    """What on the host may use a pool of one page size, the engine left out."""

    mounts: Tuple[HugetlbfsMount, ...]
    """hugetlbfs mounts of that size other than :data:`ENGINE_MOUNT`."""
    holders: Tuple[Holder, ...]
    """Processes holding hugetlb pages that are not the engine's."""
    devices: Tuple[PoolDevice, ...]
    """Vector engines and NICs bound for DPDK."""
    dpdk: Tuple[Tuple[int, str], ...]
    """(pid, name) of DPDK processes that hold no hugetlb pages (yet)."""
    shm_group: int
    """``vm.hugetlb_shm_group`` when not 0, else 0."""
    page_size: int
    """The default page size, to count the holders' pages in."""

    @property
    def any(self) -> bool:
        """Whether anything but the engine may use the pool."""
        return bool(self.mounts or self.holders or self.devices or self.dpdk or self.shm_group)

    @property
    def text(self) -> str:
        """Each user with its numbers: ``8 NEC SX-Aurora vector engines (1bcf:001c, driver
        ve_drv, at 0000:1a:00.0 to 0000:b2:00.0); veos pid 2101: 512 pages``."""
        kinds = {d.kind for d in self.devices}
        parts = [_devices_words(self.devices, kind) for kind in _KINDS if kind in kinds]
        parts += [_holders_words(name, [h for h in self.holders if h.name == name], self.page_size)
                  for name in dict.fromkeys(h.name for h in self.holders)]
        parts += [f"{name} pid {pid}" for pid, name in self.dpdk[:4]]
        parts += [f"hugetlbfs mounted at {m.mount_point} ({_files(len(m.files))})" for m in self.mounts]
        if self.shm_group:
            parts.append(f"vm.hugetlb_shm_group = {self.shm_group} (group {self.shm_group} may make "
                         "SHM_HUGETLB segments)")
        return "; ".join(parts)


def _holders_words(name: str, holders: List[Holder], page_size: int) -> str:
    """``veos pid 3101: 256 2 MiB pages (512.00 MiB)``, or for several of one name
    ``veos (8 processes, pids 3101, 3102, 3103, 3104, ...): 2,048 2 MiB pages (4.00 GiB)``."""
    held = sum(h.bytes for h in holders)
    pages = f"{format_count(held // page_size)} {format_page_size(page_size)} pages ({format_bytes(held)})"
    if len(holders) == 1:
        return f"{name} pid {holders[0].pid}: {pages}"
    pids = ", ".join(str(h.pid) for h in sorted(holders, key=lambda h: h.pid)[:4])
    more = ", ..." if len(holders) > 4 else ""
    return f"{name} ({len(holders):,} processes, pids {pids}{more}): {pages}"


def _files(count: int) -> str:
    """``no files now``, ``1 file``, ``3 files``."""
    return "no files now" if not count else f"{count} file{'' if count == 1 else 's'}"


def _devices_words(devices: Tuple[PoolDevice, ...], kind: str) -> str:
    """``8 NEC SX-Aurora vector engines (1bcf:001c, driver ve_drv, at 0000:1a:00.0, ...)``."""
    of_kind = [d for d in devices if d.kind == kind]
    one, many = _KINDS[kind]
    ids = ", ".join(f"{i} x{n}" if len(of_kind) > 1 and n < len(of_kind) else i
                    for i, n in Counter(d.ids for d in of_kind).items())
    drivers = ", ".join(sorted({d.driver or "no driver" for d in of_kind}))
    where = ", ".join(d.address for d in of_kind[:8]) + (", ..." if len(of_kind) > 8 else "")
    return (f"{len(of_kind):,} {one if len(of_kind) == 1 else many} ({ids}, driver {drivers}, "
            f"at {where})")


def is_engines(name: str, unit: str) -> bool:
    """Whether a process is the engine's own tool: named after its unit (``strata``,
    ``strata-bench`` beside ``strata.service``)."""
    stem = unit.rsplit(".", 1)[0]
    return bool(stem) and (name == stem or name.startswith(stem + "-"))


def other_pool_users(
    facts: HugepageFacts, size: int, engine_pid: Optional[int], unit: str,
) -> PoolUsers:
    """Everything but the engine that may use the pool of ``size`` bytes."""
    mounts = tuple(m for m in facts.mounts if m.mount_point != ENGINE_MOUNT
                   and (m.page_size or facts.page_size) == size)
    holders = tuple(h for h in facts.holders if h.pid != engine_pid and not is_engines(h.name, unit))
    held = {h.pid for h in facts.holders}
    dpdk = tuple((pid, name) for pid, name in facts.users.dpdk if pid not in held)
    return PoolUsers(mounts, holders, facts.users.devices, dpdk, facts.users.shm_group or 0,
                     facts.page_size)

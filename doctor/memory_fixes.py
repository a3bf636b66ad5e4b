"""Fix builders for the memory checks (hugepages, transparent hugepages, systemd-oomd).

Checks call these and attach the result to a finding; only the applier writes. The
templates named here live in ``templates/``:

- ``sysctl.conf.j2`` with ``settings`` (a tuple of ``(key, value, reason)``) and
  ``finding`` (``check/finding-id``), written to ``/etc/sysctl.d/60-strata-doctor.conf``.
- ``oomd-dropin.conf.j2`` with ``unit`` and ``finding``, written to
  ``/etc/systemd/system/<unit>.d/60-strata-doctor-oomd.conf``.
"""

from __future__ import annotations

from typing import Dict, Sequence, Tuple

from strata_doctor.memory import SysctlSetting, count, format_page_size, size_dir_name
from strata_doctor.model import FileChange, Fix, ManualStep, RuntimeAction, context_pairs

SYSCTL_FILE = "/etc/sysctl.d/60-strata-doctor.conf"
SYSCTL_NAME = "60-strata-doctor.conf"
OOMD_DROPIN = "60-strata-doctor-oomd.conf"
NODE_DIR = "/sys/devices/system/node"


def sysctl_fix(
    settings: Sequence[Tuple[str, str, str]], finding: str,
    overriding: Sequence[SysctlSetting] = (),
) -> Fix:
    """Write ``/etc/sysctl.d/60-strata-doctor.conf`` and apply it now with ``sysctl``.

    ``settings`` are ``(key, value, reason)``; ``overriding`` are assignments in files that
    sysctl.d(5) applies after ours (a later name, or ``/etc/sysctl.conf``), which would undo
    the fix at the next boot: the fix asks for them to be removed.
    """
    change = FileChange(
        path=SYSCTL_FILE,
        template="sysctl.conf.j2",
        context=context_pairs(settings=tuple(tuple(s) for s in settings), finding=finding),
    )
    actions = tuple(RuntimeAction("sysctl", key, value) for key, value, _ in settings)
    manual = tuple(
        ManualStep(
            f"Remove `{s.key} = {s.value}` from {s.path}: it is applied after {SYSCTL_NAME} "
            "(sysctl.d applies files in name order, /etc/sysctl.conf last) and would undo this "
            "fix at the next boot."
        )
        for s in overriding
    )
    summary = ", ".join(f"{key} = {value}" for key, value, _ in settings)
    return Fix(
        summary=f"set {summary} in {SYSCTL_FILE} and apply it now",
        files=(change,),
        actions=actions,
        manual=manual,
        takes_effect="now",
    )


def node_pool_fix(
    node: int, pages: int, page_size: int, other_nodes: Dict[int, int],
    overriding: Sequence[SysctlSetting] = (),
) -> Fix:
    """Put the whole pool on one node: sysfs now, the kernel command line for the next boot.

    Per-node pools cannot be set by sysctl: ``vm.nr_hugepages`` spreads pages over every
    node. ``other_nodes`` are the other nodes' current counts, set to 0 now.
    """
    size_dir = size_dir_name(page_size)
    actions = [RuntimeAction("write-sysfs", f"{NODE_DIR}/node{node}/hugepages/{size_dir}/nr_hugepages",
                             str(pages))]
    actions.extend(
        RuntimeAction("write-sysfs", f"{NODE_DIR}/node{other}/hugepages/{size_dir}/nr_hugepages", "0")
        for other in sorted(other_nodes) if other_nodes[other] > 0
    )
    size_arg = f"{page_size // 1024**2}M" if page_size % 1024**2 == 0 else f"{page_size // 1024}K"
    if page_size % 1024**3 == 0:
        size_arg = f"{page_size // 1024**3}G"
    manual = [ManualStep(
        f"To keep it after a reboot, add `hugepagesz={size_arg} hugepages={node}:{pages}` to the "
        "kernel command line (per-node counts need Linux 5.16+; on older kernels write "
        f"{pages} to node{node}'s nr_hugepages from a oneshot unit at boot). vm.nr_hugepages "
        "cannot do this: it spreads the pool over every node."
    )]
    manual.extend(
        ManualStep(f"Remove `{s.key} = {s.value}` from {s.path}: at boot it would spread the pool "
                   "over every node again.")
        for s in overriding
    )
    return Fix(
        summary=f"reserve {count(pages)} {format_page_size(page_size)} pages on node {node} only "
        "(the GPU's node)",
        actions=tuple(actions),
        manual=tuple(manual),
        takes_effect="now",
    )


def size_pool_fix(page_size: int, finding: str) -> Fix:
    """Release a pool of a non-default page size (vm.nr_hugepages cannot reach it)."""
    path = f"/sys/kernel/mm/hugepages/{size_dir_name(page_size)}/nr_hugepages"
    return Fix(
        summary=f"release the unused {format_page_size(page_size)} pool",
        actions=(RuntimeAction("write-sysfs", path, "0"),),
        manual=(ManualStep(
            f"Remove `hugepagesz=... hugepages=...` for {format_page_size(page_size)} pages from the "
            f"kernel command line, or the pool comes back at the next boot ({finding})."
        ),),
        takes_effect="now",
    )


def oomd_dropin_fix(unit: str, finding: str) -> Fix:
    """``ManagedOOMPreference=avoid`` for the engine's system unit (never oomd off host-wide)."""
    change = FileChange(
        path=f"/etc/systemd/system/{unit}.d/{OOMD_DROPIN}",
        template="oomd-dropin.conf.j2",
        context=context_pairs(unit=unit, finding=finding),
    )
    return Fix(
        summary=f"ask systemd-oomd to spare {unit}: ManagedOOMPreference=avoid in a drop-in "
        "(oomd stays on for the rest of the host)",
        files=(change,),
        actions=(RuntimeAction("daemon-reload", "systemd"),),
        manual=(ManualStep(
            f"Restart {unit} when convenient: systemd marks its cgroup for oomd when it starts. "
            "oomd honours the preference only for root-owned cgroups, i.e. system services."
        ),),
        takes_effect="restart",
    )


def move_to_system_service_fix(unit: str, uid: int) -> Fix:
    """A user-session engine cannot be protected in place: move it into a system service."""
    return Fix(
        summary=f"run the engine as the system service {unit} (User= uid {uid}) instead of in the "
        f"desktop session, then protect it with ManagedOOMPreference=avoid",
        manual=(ManualStep(
            f"Create {unit} under /etc/systemd/system with User= the uid-{uid} account and the "
            "engine's command line, stop the session copy, and `systemctl enable --now "
            f"{unit}`; then run `strata-doctor fix --only oomd` again. systemd-oomd honours "
            "ManagedOOMPreference only for root-owned cgroups, so it cannot protect a process "
            f"under user@{uid}.service. Do not turn systemd-oomd off host-wide: it also protects "
            "the desktop from a runaway process."
        ),),
        takes_effect="restart",
    )

"""Fix builders for the memory checks (hugepages, transparent hugepages, systemd-oomd).

Checks call these and attach the result to a finding; only the applier writes. The
templates named here live in ``templates/``:

- ``sysctl.conf.j2`` with ``settings`` (a tuple of ``(key, value, reason)``) and
  ``finding`` (``check/finding-id``), written to ``/etc/sysctl.d/60-strata-doctor.conf``,
  or to a later name (``81-strata-doctor.conf``) when a file that sorts after 60 sets the
  same key: sysctl.d(5) applies files in name order and the last assignment wins.
- ``oomd-dropin.conf.j2`` with ``unit`` and ``finding``, written to
  ``/etc/systemd/system/<unit>.d/60-strata-doctor-oomd.conf``.
"""

from __future__ import annotations

import os
from typing import Dict, List, Optional, Sequence, Tuple

from strata_doctor.facts.hugepage_pools import size_dir_name
from strata_doctor.facts.hugepages import format_page_size
from strata_doctor.facts.numa import NODE_DIR
from strata_doctor.facts.oomd import OOMD_DROPIN
from strata_doctor.facts.parse import format_count
from strata_doctor.facts.sysctl import SysctlConfig, SysctlSetting
from strata_doctor.model import FileChange, Fix, ManualStep, RuntimeAction, context_pairs

SYSCTL_FILE = "/etc/sysctl.d/60-strata-doctor.conf"
SYSCTL_NAME = "60-strata-doctor.conf"
OWN_SUFFIX = "strata-doctor.conf"


def sysctl_placement(
    settings: Sequence[Tuple[str, str, str]], config: Optional[SysctlConfig],
) -> Tuple[str, Tuple[SysctlSetting, ...]]:
    """Where the sysctl file must go to win, and the assignments no file name can outrank.

    sysctl.d(5) applies every file in the lexicographic order of its name and the last
    assignment wins, so ``60-strata-doctor.conf`` loses to an ``80-hugepages.conf`` that
    sets the same key. The file then takes a name that sorts after every conflicting one
    (``81-strata-doctor.conf``, else ``99-zz-strata-doctor.conf``). ``/etc/sysctl.conf``,
    which ``sysctl --system`` applies after every sysctl.d file, cannot be outranked: its
    conflicting lines are returned for a manual step.
    """
    if config is None:
        return SYSCTL_FILE, ()
    conflicting = _conflicting(settings, config)
    stuck = tuple(s for s in conflicting if s.path == "/etc/sysctl.conf")
    later = [name for name in map(_outranking, conflicting) if name]
    if not later:
        return SYSCTL_FILE, stuck
    name = _name_after(max(later))
    if name is not None:
        return f"/etc/sysctl.d/{name}", stuck
    beaten = tuple(s for s in config.settings if os.path.basename(s.path) in later)
    return SYSCTL_FILE, stuck + beaten


def _conflicting(settings: Sequence[Tuple[str, str, str]], config: SysctlConfig) -> List[SysctlSetting]:
    """The host's assignments of our keys to other values, in the order sysctl applies them."""
    wanted = {key: value for key, value, _ in settings}
    return [s for s in config.settings if s.key in wanted and s.value.strip() != wanted[s.key]]


def _outranking(setting: SysctlSetting) -> str:
    """The name of the sysctl.d file that sets ``setting`` when it sorts after ours; "" when
    it does not, is /etc/sysctl.conf, or is our own file from an earlier apply (rewritten)."""
    name = os.path.basename(setting.path)
    own = name.endswith(OWN_SUFFIX) and setting.path.startswith("/etc/sysctl.d/")
    if setting.path == "/etc/sysctl.conf" or own:
        return ""
    return name if name >= SYSCTL_NAME else ""


def _name_after(last: str) -> Optional[str]:
    """Our file's name sorting after ``last`` (one more than its number, else ``99-zz-``);
    None when neither does."""
    candidates = []
    digits = last.split("-", 1)[0]
    if digits.isdigit() and int(digits) < 99:
        candidates.append(f"{int(digits) + 1:0{len(digits)}d}-{OWN_SUFFIX}")
    candidates.append(f"99-zz-{OWN_SUFFIX}")
    return next((name for name in candidates if name > last), None)


def sysctl_fix(
    settings: Sequence[Tuple[str, str, str]], finding: str, config: Optional[SysctlConfig] = None,
) -> Fix:
    """Write the sysctl.d file (``60-strata-doctor.conf`` unless a later file conflicts) and
    apply it now with ``sysctl``.

    ``settings`` are ``(key, value, reason)``; ``config`` is the host's sysctl.d state, used
    to pick a file name that wins and to name the lines nothing can outrank.
    """
    path, overriding = sysctl_placement(settings, config)
    change = FileChange(
        path=path,
        template="sysctl.conf.j2",
        context=context_pairs(settings=tuple(tuple(s) for s in settings), finding=finding),
    )
    actions = tuple(RuntimeAction("sysctl", key, value) for key, value, _ in settings)
    manual = tuple(
        ManualStep(
            f"Remove `{s.key} = {s.value}` from {s.path}: `sysctl --system` applies it after every "
            f"sysctl.d file, so it would undo {os.path.basename(path)} the next time settings load."
        )
        for s in overriding
    )
    summary = ", ".join(f"{key} = {value}" for key, value, _ in settings)
    if path != SYSCTL_FILE:
        summary += f" in {path} (named to sort after the files that set it now)"
    else:
        summary += f" in {path}"
    return Fix(
        summary=f"set {summary} and apply it now",
        files=(change,),
        actions=actions,
        manual=manual,
        takes_effect="now",
    )


def node_pool_fix(
    node: int, pages: int, page_size: int, other_nodes: Dict[int, int],
    overriding: Sequence[SysctlSetting] = (), boot_config: Sequence[Tuple[str, str]] = (),
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
    wanted = f"hugepagesz={size_arg} hugepages={node}:{pages}"
    manual = [ManualStep(
        f"In {path}, replace `{words}` with `{wanted}` (then regenerate the boot configuration, "
        "e.g. update-grub), or the old pool comes back at the next boot."
    ) for path, words in boot_config]
    manual.append(ManualStep(
        f"To keep it after a reboot, add `{wanted}` to the "
        "kernel command line (per-node counts need Linux 5.16+; on older kernels write "
        f"{pages} to node{node}'s nr_hugepages from a oneshot unit at boot). vm.nr_hugepages "
        "cannot do this: it spreads the pool over every node."
    ) if not boot_config else ManualStep(
        f"Per-node counts on the command line need Linux 5.16+; on older kernels write {pages} to "
        f"node{node}'s nr_hugepages from a oneshot unit at boot instead."
    ))
    manual.extend(
        ManualStep(f"Remove `{s.key} = {s.value}` from {s.path}: at boot it would spread the pool "
                   "over every node again.")
        for s in overriding
    )
    return Fix(
        summary=f"reserve {format_count(pages)} {format_page_size(page_size)} pages on node {node} only "
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
        # systemd marks the cgroup for oomd when the unit starts; the plan lists one restart
        # per unit (docs/fix.md), and the drop-in itself says it works for system services only.
        actions=(RuntimeAction("daemon-reload", "systemd"), RuntimeAction("restart-unit", unit)),
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

"""systemd unit files on disk: where a unit's file and drop-ins are, and what they say.

This is the configured state, which may differ from what ``systemctl show`` reports until
the next ``systemctl daemon-reload``: checks read both, so a fix that is written but not
yet in effect shows as pending.
"""

from __future__ import annotations

from typing import Dict, List, Optional, Tuple

from strata_doctor.facts.unitfile import parse_ini
from strata_doctor.root import Root

RESERVED_UNITS = (("system.slice", "Slice"), ("user.slice", "Slice"), ("init.scope", "Scope"))
"""Top-level cgroups that ``fix --reserve-node`` moves off the engine's node, with their section."""
UNIT_DIRS = ("/etc/systemd/system", "/run/systemd/system", "/usr/lib/systemd/system",
             "/lib/systemd/system")
"""Unit directories, most specific first."""


def unit_file_paths(root: Root, unit: str) -> List[str]:
    """The unit's file and drop-ins in the order systemd applies them.

    Drop-in directories from general to specific: ``<type>.d`` (systemd 246+), dash
    prefixes (``user-.slice.d``), the template (``user@.service.d``), the unit itself; a
    drop-in of the same name in a more specific directory (or in /etc over /run over
    /usr/lib) replaces the other; the survivors apply in name order.
    """
    name, _, kind = unit.rpartition(".")
    template = name.split("@", 1)[0] + "@." + kind if "@" in name else None
    files = _unit_file(root, [unit] if template is None else [unit, template])
    chosen: Dict[str, str] = {}
    for level in _dropin_levels(unit, template):
        chosen.update(_dropins(root, level))
    files.extend(chosen[n] for n in sorted(chosen))
    return files


def _unit_file(root: Root, candidates: List[str]) -> List[str]:
    """The file of the first of ``candidates`` (the unit, then its template) that has one,
    from the most specific unit directory; empty when none has."""
    for cand in candidates:
        for directory in UNIT_DIRS:
            if root.read(f"{directory}/{cand}") is not None:
                return [f"{directory}/{cand}"]
    return []


def _dropin_levels(unit: str, template: Optional[str]) -> List[str]:
    """The drop-in directories of ``unit``, general to specific: ``<type>.d``, each dash
    prefix's, the template's, the unit's own."""
    name, _, kind = unit.rpartition(".")
    levels = [f"{kind}.d"]
    dashed = name.split("-")
    levels += ["-".join(dashed[:i]) + "-." + kind + ".d" for i in range(1, len(dashed))
               if name != "-"]
    if template:
        levels.append(template + ".d")
    levels.append(unit + ".d")
    return levels


def _dropins(root: Root, level: str) -> Dict[str, str]:
    """Drop-in name -> its file, of one drop-in directory name in every unit directory; /etc
    over /run over /usr/lib."""
    found: Dict[str, str] = {}
    for directory in reversed(UNIT_DIRS):
        for entry in root.listdir(f"{directory}/{level}"):
            if entry.endswith(".conf"):
                found[entry] = f"{directory}/{level}/{entry}"
    return found


def unit_settings(root: Root, unit: str, section: str) -> Dict[str, Tuple[str, str]]:
    """``key -> (value, file)`` of one section, merged as systemd merges on reload.

    A later file's assignment wins; an empty assignment resets the key.
    """
    merged: Dict[str, Tuple[str, str]] = {}
    for path in unit_file_paths(root, unit):
        for found_section, key, value in parse_ini(root.read(path) or ""):
            if found_section != section:
                continue
            if value:
                merged[key] = (value, path)
            else:
                merged.pop(key, None)
    return merged


def unit_setting(root: Root, unit: str, section: str, key: str) -> Optional[str]:
    """One merged setting's value, or None when no file sets it."""
    found = unit_settings(root, unit, section).get(key)
    return found[0] if found else None

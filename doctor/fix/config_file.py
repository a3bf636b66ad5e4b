"""The engine's config file that ``strata-doctor init`` writes, as a plan of one file.

Every setting given by a flag or found in the config in effect is written, each with a
comment saying where its value came from, plus what the host shows (the engine's unit,
the compute GPU gpu-placement chose). The plan is a :class:`~strata_doctor.fix.plan.FixPlan`
like ``fix``'s, so the one writer (:mod:`strata_doctor.fix.apply`) carries it out and
``fix --revert`` undoes it, the original kept byte for byte.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

from strata_doctor.config import DEFAULT_CONFIG, KEYS, ConfigError, EngineConfig, apply_settings, parse_config
from strata_doctor.context import HostContext
from strata_doctor.facts.units import UNIT_DIRS
from strata_doctor.fix.plan import Answer, FixPlan
from strata_doctor.fix.plan_files import MANAGED_MARKER, PlannedFile, render_template, with_current

TEMPLATE = "strata-doctor.yaml.j2"
FINDING = "init/config"
"""How the plan names what it answers: the config ``init`` was asked for."""
CONFIG_MODE = 0o644


@dataclass(frozen=True)
class Setting:
    """One key of the file to write."""

    key: str
    """The config key."""
    value: object
    """Its value as YAML will hold it: the text or number given, a boolean."""
    origin: str
    """Where the value came from, the comment line above it."""


@dataclass(frozen=True)
class Given:
    """The settings ``init`` was given: flags over the config file in effect."""

    flags: Tuple[Tuple[str, object, str], ...] = ()
    """(key, value, the flag as typed, e.g. ``--arena 46.84GiB``) of each setting flag."""
    written: Tuple[Tuple[str, object], ...] = ()
    """(key, value as the file wrote it) of the config file in effect."""
    source: Optional[str] = None
    """That file, as the host names it (``/etc/strata-doctor.yaml``) or as given (``--config``)."""


def settings_for(ctx: HostContext, given: Given, origins: Mapping[str, str]) -> List[Setting]:
    """Every key with a value, in :data:`~strata_doctor.config.KEYS` order: a flag's first,
    then the config file's (under the origin its comment gives, when ``init`` wrote it:
    ``origins``), then what the host shows."""
    flags = {key: (value, typed) for key, value, typed in given.flags}
    written = dict(given.written)
    found: List[Setting] = []
    for key in KEYS:
        if key in flags:
            value, typed = flags[key]
            found.append(Setting(key, _natural(value), f"given on the command line: {typed}"))
        elif key in written:
            found.append(Setting(key, written[key], origins.get(key, f"kept from {given.source}")))
        else:
            shown = _host_shows(ctx, key)
            if shown is not None:
                found.append(shown)
    return found


def _natural(value: object) -> object:
    """A flag's text as YAML would hold it typed: ``8`` a number (``08`` stays text)."""
    if isinstance(value, str) and value.isascii() and value.isdigit() and str(int(value)) == value:
        return int(value)
    return value


def _host_shows(ctx: HostContext, key: str) -> Optional[Setting]:
    """The value the host shows for ``key``: the engine's unit when it exists, the compute GPU."""
    if key == "unit":
        unit = ctx.config.unit
        if ctx.unit.loaded:
            return Setting(key, unit, f"the engine's unit: systemd has {unit} loaded")
        where = next((f"{d}/{unit}" for d in UNIT_DIRS if ctx.root.exists(f"{d}/{unit}")), None)
        return Setting(key, unit, f"the engine's unit, found at {where}") if where else None
    sizes = ctx.config.sizes
    if key == "model" and sizes is not None and sizes.model is not None and sizes.model_by:
        return Setting(key, sizes.model, f"the engine's model, named by {sizes.model_by}")
    if key == "gpu" and ctx.placement is not None:
        gpu, node = ctx.placement.gpu, ctx.placement.node
        on = f"on node {node}" if node is not None else "on no NUMA node the tree names"
        return Setting(key, gpu.address, f"the compute GPU gpu-placement chose: {gpu.vendor_name} "
                                         f"{gpu.ids} {on}")
    return None


def config_text(settings: Sequence[Setting]) -> str:
    """The file: the managed-by header, then each setting under its origin."""
    import yaml  # only for init, which writes YAML

    lines = [(s.origin, yaml.safe_dump({s.key: s.value}, default_flow_style=False, sort_keys=False,
                                       allow_unicode=True, width=1 << 16).rstrip("\n"))
             for s in settings]
    named = {s.key for s in settings}
    unset = ", ".join(key for key in KEYS if key not in named)
    return render_template(TEMPLATE, {"written_by": "strata-doctor init --apply", "settings": lines,
                                      "unset": unset})


def read_back(text: str, expected: EngineConfig) -> List[str]:
    """What differs between the settings ``text`` holds and ``expected`` (empty: none), so
    that a file that would not read back as given is never written."""
    import yaml

    try:
        read = parse_config(yaml.safe_load(text), DEFAULT_CONFIG)
    except (ConfigError, yaml.YAMLError) as exc:
        return [f"{DEFAULT_CONFIG} would not read back: {exc}"]
    return [f"{DEFAULT_CONFIG} would read back {field} as {getattr(read, field)!r}, "
            f"not {getattr(expected, field)!r}"
            for field in EngineConfig._fields
            if field not in PROVENANCE and getattr(read, field) != getattr(expected, field)]


PROVENANCE = ("source", "gpu_source", "given", "sizes")
"""Who gave each setting, not a setting: the file read back names itself for all of them."""


def origins_of(current: Optional[bytes]) -> Dict[str, str]:
    """Key -> the origin comment above it, in a config ``init`` wrote (its header there):
    a value kept from it keeps saying where it came from, so a second run changes nothing."""
    text = (current or b"").decode("utf-8", "replace")
    if MANAGED_MARKER not in text:
        return {}
    found: Dict[str, str] = {}
    above = ""
    for line in text.splitlines():
        key, colon, _ = line.partition(":")
        if line.startswith("# "):
            above = line[2:]
        elif colon and key in KEYS and above:
            found[key] = above
            above = ""
        else:
            above = ""
    return found


def init_plan(ctx: HostContext, given: Given, force: bool) -> FixPlan:
    """The plan of one file: ``/etc/strata-doctor.yaml`` under the root, with what is there now."""
    empty = PlannedFile(DEFAULT_CONFIG, CONFIG_MODE, "", TEMPLATE, (FINDING,))
    current = with_current(ctx.root, empty, force).current
    kept = origins_of(current) if given.source == DEFAULT_CONFIG else {}
    settings = settings_for(ctx, given, kept)
    content = config_text(settings)
    chosen = {s.key: s.value for s in settings}
    # The settings as the same converters take them from the values chosen: what the written
    # file must read back as (the sizes a model gives are no setting, and stay out).
    expected = apply_settings(EngineConfig(), chosen, "init")
    planned = with_current(ctx.root, replace(empty, content=content), force)
    if planned.current_mode is not None:  # a config kept private stays so
        planned = replace(planned, mode=planned.current_mode)
    problems = read_back(content, expected)
    if planned.blocked:
        problems.append(f"{planned.path}: {planned.blocked}")
    summary = f"write the engine's settings to {DEFAULT_CONFIG} ({_keys(settings)})"
    return FixPlan(root=str(ctx.root.base), unit=ctx.config.unit,
                   answers=(Answer(FINDING, "requested", summary, "now"),), files=(planned,),
                   actions=(), manual=(), problems=tuple(problems), live=ctx.root.live)


def _keys(settings: Sequence[Setting]) -> str:
    names = [s.key for s in settings]
    if not names:
        return "no setting is given or found: only the header"
    return f"{len(names)} {'key' if len(names) == 1 else 'keys'}: {', '.join(names)}"


def written_settings(written: Mapping[str, object]) -> Tuple[Tuple[str, object], ...]:
    """The config file's values, in key order, for :class:`Given`."""
    return tuple((key, written[key]) for key in KEYS if key in written and written[key] is not None)

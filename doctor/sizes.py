"""Where the arena and K/V sizes come from: ``--arena``/``--kv`` and ``arena:``/``kv:`` when
given, else the engine's model, whose header says them (docs/config.md, "Sizes").

The model is the one ``--model`` or ``model:`` names, else the one on the engine's own
command line: its unit's ``ExecStart=`` in effect, else the running engine's
``/proc/PID/cmdline``. One function, :func:`with_model_sizes`, called as a HostContext is
built, so every command and :func:`strata_doctor.api.plan_binding` see the same sizes.
"""

from __future__ import annotations

from typing import Callable, NamedTuple, Optional

from strata_doctor.config import EngineConfig
from strata_doctor.facts.engine_args import (
    EngineCommand,
    read_process_command,
    read_unit_command,
    resolve,
)
from strata_doctor.facts.model_file import ModelHeader, read_model
from strata_doctor.facts.parse import format_bytes
from strata_doctor.model import SizeSources
from strata_doctor.root import Root
from strata_doctor.rules.model_sizes import SizeFigure, arena_from, kv_from

SIZE_SOURCES = "/.strata-doctor/size-sources"
"""In a bundle: ``KEY<TAB>SOURCE`` lines, who gave each size setting on the host (``command
line`` or a config file), as its settings file holds them all alike."""


def replayed_sources(root: Root, config: EngineConfig) -> EngineConfig:
    """``config`` with the sources a bundle recorded for its size settings (a replay's own
    config file would name itself for all of them)."""
    if root.live or not root.exists(SIZE_SOURCES):
        return config
    rows = [line.split("\t", 1) for line in (root.read(SIZE_SOURCES) or "").splitlines()]
    given = tuple((row[0], row[1]) for row in rows if len(row) == 2 and row[1])
    return config._replace(given=given) if given else config


class ModelChoice(NamedTuple):
    """The model the engine serves, as found, with what sizes its K/V cache."""

    path: str
    """As written; absolute once resolved."""
    named_by: str
    """``--model``, ``model: in FILE``, ``ExecStart in strata.service``..."""
    resolved: Optional[str]
    """The absolute host path; None when a relative path cannot be resolved."""
    why: str
    """Why :attr:`resolved` is None."""
    context: Optional[int]
    """Tokens of K/V cache: ``context:``, else the command line's; None: the model's own."""
    cache_type: str
    """``cache_type:``, else the command line's, else ``f16``."""


PidOf = Callable[[], Optional[int]]
"""The running engine's PID, asked only when needed."""


def with_model_sizes(root: Root, config: EngineConfig, engine_pid: PidOf) -> EngineConfig:
    """``config`` with its arena and K/V sized from the model where they are not given,
    and :attr:`EngineConfig.sizes` saying where each came from; unchanged when already
    sized. ``engine_pid`` is asked only when the unit's files name no model."""
    if config.sizes is not None:
        return config
    config = replayed_sources(root, config)
    arena_by, kv_by = config.named_by("arena"), config.named_by("kv")
    given = SizeSources(arena=arena_by, kv=kv_by)
    if arena_by is not None and kv_by is not None:
        return config._replace(sizes=given)
    choice = find_model(root, config, engine_pid)
    if choice is None:
        return config._replace(sizes=given)
    if choice.resolved is None:
        reason = f"model {choice.path} ({choice.named_by}): {choice.why}"
        return config._replace(sizes=_unsized(given, reason))
    read = read_model(root, choice.resolved)
    if read.header is None:
        why = "no such file" if read.reason == "missing" else read.reason
        reason = f"model {choice.resolved} ({choice.named_by}): {why}"
        return config._replace(sizes=_unsized(given, reason))
    return _sized(config, given, choice, read.header)


def _unsized(given: SizeSources, reason: str) -> SizeSources:
    """The sources where the model gave nothing: the reason for each size not given."""
    return given._replace(arena_reason="" if given.arena else f"{reason}; pass --arena",
                          kv_reason="" if given.kv else f"{reason}; pass --kv")


def _sized(config: EngineConfig, given: SizeSources, choice: ModelChoice,
           header: ModelHeader) -> EngineConfig:
    """``config`` with each size not given taken from the model's header."""
    path = choice.resolved or choice.path
    sources = given._replace(model=path, model_by=choice.named_by)
    changes = {}
    if given.arena is None:
        arena = arena_from(header)
        if isinstance(arena, SizeFigure):
            changes["arena_bytes"] = arena.bytes
            sources = sources._replace(arena=f"the routed experts of {path} (named by {choice.named_by})",
                                       arena_how=arena.source)
        else:
            sources = sources._replace(arena_reason=f"model {path}: {arena}; pass --arena")
    if given.kv is None:
        kv = kv_from(header, choice.context, choice.cache_type)
        if isinstance(kv, SizeFigure):
            changes["kv_bytes"] = kv.bytes
            where = "" if sources.arena_how else f" ({path}, named by {choice.named_by})"
            total = f" = {format_bytes(kv.bytes)}"  # the line gives the size before the sum
            shown = kv.source[:-len(total)] if kv.source.endswith(total) else kv.source
            sources = sources._replace(kv=shown + where, kv_how=shown)
        else:
            sources = sources._replace(kv_reason=f"model {path}: {kv}; pass --kv")
    return config._replace(sizes=sources, **changes)  # type: ignore[arg-type]


def find_model(root: Root, config: EngineConfig, engine_pid: PidOf) -> Optional[ModelChoice]:
    """The model ``--model``/``model:`` names, else the one on the engine unit's
    ``ExecStart=``, else on the running engine's command line; None when none names one."""
    cache_type = config.cache_type or "f16"
    if config.model is not None:
        by = config.named_by("model") or "model:"
        resolved = resolve(config.model, None)
        why = "" if resolved else "a relative path; name the model by its absolute path"
        return ModelChoice(config.model, by, resolved, why, config.context, cache_type)
    command = read_unit_command(root, config.unit)
    if command is None or command.args.model is None:
        pid = engine_pid()
        command = read_process_command(root, pid) if pid else None
    if command is None or command.args.model is None:
        return None
    return _from_command(command, config, cache_type)


def _from_command(command: EngineCommand, config: EngineConfig, cache_type: str) -> ModelChoice:
    """The model an engine command line names, resolved against its working folder."""
    model = command.args.model or ""
    resolved = resolve(model, command.cwd)
    why = "" if resolved else f"a relative path, and {command.cwd_why}"
    if "$" in model or "%" in model:
        resolved, why = None, "a path through a variable or specifier, which is not expanded"
    context = config.context if config.context is not None else _tokens(command.args.context)
    cache = config.cache_type or (command.args.cache_type or cache_type).lower()
    return ModelChoice(model, command.named_by, resolved, why, context, cache)


def _tokens(text: Optional[str]) -> Optional[int]:
    """A command line's context length; None for none, 0 (the model's own) or no number."""
    return int(text) if text is not None and text.isdigit() and int(text) > 0 else None


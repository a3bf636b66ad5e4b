"""The engine's settings: --arena-style options over /etc/strata-doctor.yaml. An input, not a fact."""

import re
from typing import Callable, Dict, Mapping, NamedTuple, Optional, Tuple

# The error, the file's name and its bound are this module's too: every caller imports them here.
from strata_doctor.config_read import DEFAULT_CONFIG as DEFAULT_CONFIG
from strata_doctor.config_read import MAX_CONFIG_BYTES as MAX_CONFIG_BYTES
from strata_doctor.config_read import ConfigError as ConfigError
from strata_doctor.config_read import read_default, read_named
from strata_doctor.facts.parse import (
    parse_setting_size,
)
from strata_doctor.model import SizeSources
from strata_doctor.root import Root

CONFIG_SOURCE = "/.strata-doctor/config-source"
"""In a bundle: where the host's settings came from (empty: the command line)."""


DEFAULT_UNIT = "strata.service"


DEFAULT_HEADROOM = 4 * 1024**3


HUGEPAGE_MODES = ("auto", "hugetlb", "thp")


CACHE_TYPES = ("f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1")
"""llama.cpp's ``--cache-type-k`` values (``cache_type:``)."""
SIZE_KEYS = ("arena", "kv", "model", "context", "cache_type")
"""The settings whose source :attr:`EngineConfig.given` keeps: the sizes, and what sizes them."""


class EngineConfig(NamedTuple):
    """What the engine will need, from options or the YAML config."""

    arena_bytes: Optional[int] = None
    """Pinned expert arena (``arena:``)."""
    kv_bytes: int = 0
    """Pinned K/V cache (``kv:``)."""
    unit: str = DEFAULT_UNIT
    """The engine's systemd unit (``unit:``)."""
    workers: Optional[int] = None
    """CPU expert-pool threads (``workers:``)."""
    headroom_bytes: int = DEFAULT_HEADROOM
    """Memory to keep free beside the arena (``headroom:``)."""
    hugepages: str = "auto"
    """``hugetlb``, ``thp`` or ``auto`` (try MAP_HUGETLB, fall back to THP)."""
    gpu: Optional[str] = None
    """Compute GPU's PCI address, when chosen (``gpu:``)."""
    gpu_source: Optional[str] = None
    """Where ``gpu`` came from: ``command line`` (``--gpu``), a config file, or an API call."""
    numa: str = "auto"
    """``auto`` (the GPU's node), ``off``, or a node id (``numa:``)."""
    source: Optional[str] = None
    """The config file these came from, if any."""
    lock: bool = False
    """Whether the engine mlock()s its arena and K/V (``lock:``), so the locked-memory limit
    must hold them; pinning them for the GPU (cudaHostRegister) is not charged to that limit
    (docs/checks/memlock.md)."""
    release_pool: bool = False
    """Whether ``fix`` may release a hugepage pool that another program may use
    (``release_pool:``; docs/checks/hugepages.md)."""
    model: Optional[str] = None
    """The engine's model file or folder (``model:``, ``--model``), which sizes the arena and
    K/V where they are not given."""
    context: Optional[int] = None
    """The K/V cache's length in tokens (``context:``, ``--context``)."""
    cache_type: Optional[str] = None
    """The K/V cache's element type (``cache_type:``, ``--cache-type``), llama.cpp's names."""
    given: Tuple[Tuple[str, str], ...] = ()
    """(key, source) of each of :data:`SIZE_KEYS` that was set: ``command line``,
    ``plan_binding`` or a config file."""
    sizes: Optional[SizeSources] = None
    """Where the sizes came from; None until doctor/sizes.py has looked."""

    def named_by(self, key: str) -> Optional[str]:
        """Who set ``key`` (one of :data:`SIZE_KEYS`): ``--arena``, ``arena: in FILE``,
        ``plan_binding(arena_bytes=...)``; None when nobody did."""
        source = next((s for k, s in reversed(self.given) if k == key), None)
        if source is None:
            return None
        if source == "command line":
            return "--" + key.replace("_", "-")
        if source == "plan_binding":
            return f"plan_binding({key}{'_bytes' if key in ('arena', 'kv') else ''}=...)"
        return f"{key}: in {source}"

    def arena_hint(self, usual: str) -> str:
        """What a skip without an arena asks for: ``usual``, or why a named model gave none."""
        reason = self.sizes.arena_reason if self.sizes is not None else ""
        return reason or usual

    @property
    def gpu_named_by(self) -> str:
        """Who named the compute GPU, for the reason a finding gives: ``--gpu`` or
        ``gpu: in /etc/strata-doctor.yaml``."""
        if self.gpu_source in (None, "command line"):
            return "--gpu"
        if self.gpu_source == "plan_binding":
            return "plan_binding(gpu=...)"
        return f"gpu: in {self.gpu_source}"

    @property
    def gpu_setting(self) -> str:
        """How an error names the setting that chose the GPU: ``--gpu``, or
        ``/etc/strata-doctor.yaml: gpu:`` as for any other bad config value."""
        if self.gpu_source in (None, "command line"):
            return "--gpu"
        return f"{self.gpu_source}: gpu:"

    @property
    def pinned_bytes(self) -> Optional[int]:
        """Arena plus K/V: what the engine pins in host RAM."""
        return None if self.arena_bytes is None else self.arena_bytes + self.kv_bytes


MAX_SETTING = 100  # characters: no setting is longer; a 5000-digit number is garbage


_KEYS = ("arena", "kv", "unit", "workers", "headroom", "hugepages", "gpu", "numa", "lock", "release_pool",
         "model", "context", "cache_type")

KEYS = _KEYS
"""Every setting, in the order a written config lists them (``strata-doctor init``)."""


def parse_config(data: object, source: str) -> EngineConfig:
    """Validate a loaded YAML document into an :class:`EngineConfig`."""
    if data is None:
        return EngineConfig(source=source)
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: expected a mapping of settings, got {type(data).__name__}")
    unknown = sorted(str(k) for k in data if k not in _KEYS)
    if unknown:
        raise ConfigError(f"{source}: unknown key {unknown[0]!r} (known: {', '.join(_KEYS)})")
    return apply_settings(EngineConfig(source=source), data, source)


def apply_settings(config: EngineConfig, values: Mapping[str, object], source: str) -> EngineConfig:
    """Overlay settings (from YAML or options) on ``config``; None values are skipped."""
    changes: Dict[str, object] = {}
    for key, value in values.items():
        if value is None:
            continue
        try:
            changes.update(convert_setting(key, value))
            if key == "gpu":
                changes["gpu_source"] = source
            if key in SIZE_KEYS:
                given = changes.get("given", config.given)
                changes["given"] = (*given, (key, source))  # type: ignore[misc]
        except ValueError as exc:
            raise ConfigError(f"{source}: {key}: {exc}") from None
    return config._replace(**changes)  # type: ignore[arg-type]


def convert_setting(key: str, value: object) -> Dict[str, object]:
    """One setting's :class:`EngineConfig` fields; a bad value raises ValueError in the words an
    error gives after the file and key (or after the flag that gave it)."""
    if isinstance(value, (list, dict, set, tuple)):
        # Refused before str(): a YAML alias can make a short file a list of millions.
        raise ValueError(f"expected one value, got {_container(value)}")
    if isinstance(value, (str, int)) and not isinstance(value, bool) and len(str(value)) > MAX_SETTING:
        shown = str(value)
        raise ValueError(f"{len(shown):,} characters is too long for a setting ({shown[:16]}...)")
    return _convert(key, value)


def _container(value: object) -> str:
    """How an error names a value that holds others."""
    return "a mapping" if isinstance(value, dict) else "a list"


def _convert(key: str, value: object) -> Dict[str, object]:
    convert = _CONVERTERS.get(key)
    if convert is None:
        raise ValueError(f"unknown setting {key!r}")
    return convert(key, value)


def _size(key: str, value: object) -> Dict[str, object]:
    exact = isinstance(value, int) and not isinstance(value, bool)  # YAML integer: bytes
    size = parse_setting_size(str(value), zero_ok=key != "arena", unit_required=not exact)
    return {{"arena": "arena_bytes", "kv": "kv_bytes"}.get(key, "headroom_bytes"): size}


def _workers(key: str, value: object) -> Dict[str, object]:
    if isinstance(value, bool) or not str(value).isdigit():
        raise ValueError(f"expected a whole number, got {value!r}")
    return {"workers": int(str(value))}


def _hugepages(key: str, value: object) -> Dict[str, object]:
    if str(value) not in HUGEPAGE_MODES:
        raise ValueError(f"expected one of {', '.join(HUGEPAGE_MODES)}, got {value!r}")
    return {"hugepages": str(value)}


def _numa(key: str, value: object) -> Dict[str, object]:
    text = str(value)
    if text not in ("auto", "off") and not text.isdigit():
        raise ValueError(f"expected auto, off or a node id, got {value!r}")
    return {"numa": text}


def _unit(key: str, value: object) -> Dict[str, object]:
    text = str(value)
    if not text or "/" in text or any(ch.isspace() for ch in text):
        raise ValueError(f"not a unit name: {value!r}")
    return {"unit": text if "." in text else text + ".service"}


def _gpu(key: str, value: object) -> Dict[str, object]:
    return {"gpu": str(value)}


def _lock(key: str, value: object) -> Dict[str, object]:
    if isinstance(value, bool):
        return {key: value}
    if str(value).lower() in ("true", "yes", "on", "false", "no", "off"):
        return {key: str(value).lower() in ("true", "yes", "on")}
    raise ValueError(f"expected true or false, got {value!r}")


def _model(key: str, value: object) -> Dict[str, object]:
    text = str(value)
    if not text.strip() or "\0" in text:
        raise ValueError(f"not a path: {value!r}")
    return {"model": text}


def _context(key: str, value: object) -> Dict[str, object]:
    if isinstance(value, bool) or not str(value).isdigit() or int(str(value)) == 0:
        raise ValueError(f"expected a number of tokens (a whole number above 0), got {value!r}")
    return {"context": int(str(value))}


def _cache_type(key: str, value: object) -> Dict[str, object]:
    if str(value).lower() not in CACHE_TYPES:
        raise ValueError(f"expected one of {', '.join(CACHE_TYPES)}, got {value!r}")
    return {"cache_type": str(value).lower()}


_CONVERTERS: Dict[str, Callable[[str, object], Dict[str, object]]] = {
    "arena": _size, "kv": _size, "headroom": _size, "workers": _workers, "hugepages": _hugepages,
    "numa": _numa, "unit": _unit, "gpu": _gpu, "lock": _lock, "release_pool": _lock,
    "model": _model, "context": _context, "cache_type": _cache_type,
}
"""Each setting's check and conversion; a bad value raises ValueError with the words the
one-line error gives after ``FILE: KEY:``."""


def load_config(root: Root, path: Optional[str]) -> EngineConfig:
    """Load ``path`` (a real path given by the user) or the default file under the root.

    Errors name the real file; the config remembers the host path, so evidence reads the
    same on the host and in its replay.
    """
    return load_settings(root, path)[0]


def load_settings(root: Root, path: Optional[str]) -> Tuple[EngineConfig, Dict[str, object]]:
    """:func:`load_config`'s settings, and the values as the file wrote them (key -> YAML
    scalar; empty without a file), which ``init`` writes again as they were."""
    config, written = _load_config(root, path)
    if path is None and config.source is not None:
        shown: Optional[str] = DEFAULT_CONFIG
        if not root.live and root.exists(CONFIG_SOURCE):
            # A bundle wrote the settings here; its host named them as recorded.
            shown = root.read_value(CONFIG_SOURCE)
        by = shown or "command line"  # a bundle's empty source: they were options
        config = config._replace(source=shown, gpu_source=shown if config.gpu is not None else None,
                                 given=tuple((key, by) for key, _ in config.given))
    return config, written


def _load_config(root: Root, path: Optional[str]) -> Tuple[EngineConfig, Dict[str, object]]:
    if path is not None:
        source, text = path, read_named(path)
    else:
        found = read_default(root)
        if found is None:
            return EngineConfig(), {}
        source, text = found
    data = _parse_yaml(text, source)
    config = parse_config(data, source)
    return config, dict(data) if isinstance(data, dict) else {}


def _parse_yaml(text: str, source: str) -> object:
    import yaml  # only when there is a config to read

    try:
        return yaml.safe_load(text or "")
    except RecursionError:  # "[[[[..." thousands deep: the parser recurses per level
        raise ConfigError(f"{source}: nested too deeply for a config") from None
    except ValueError:  # an integer of more than 4300 digits: int() refuses it
        long = re.search(r"^\s*([^\s:#]+)\s*:[^\n]*?[0-9_]{4000}", text or "", re.M)
        key = f" {long[1]}:" if long else ""
        raise ConfigError(f"{source}:{key} a number too long for a setting") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        raise ConfigError(f"{source}:{where} not valid YAML") from None

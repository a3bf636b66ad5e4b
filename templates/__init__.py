"""Jinja2 templates for the files ``strata-doctor fix`` writes (see docs/fix-templates.md)
and for the Markdown report, with the one environment that renders them."""

from __future__ import annotations

from typing import Any, List, Optional

_ENV: List[Any] = []


def environment() -> Any:
    """The Jinja2 environment of these templates: strict (an unknown variable is an
    error), no HTML escaping, whitespace as written. Made on first use: only ``fix`` and
    ``report`` pay for importing jinja2."""
    if _ENV:
        return _ENV[0]
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.FunctionLoader(_load_template),
        undefined=jinja2.StrictUndefined,
        autoescape=False,  # unit files and Markdown, not HTML
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    _ENV.append(env)
    return env


def _load_template(name: str) -> Optional[str]:
    from importlib.resources import files

    resource = files(__name__).joinpath(name)
    return resource.read_text(encoding="utf-8") if resource.is_file() else None

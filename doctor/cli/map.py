"""``strata-doctor map``: a picture of the host, its nodes, GPUs and where the engine runs.

Reads through Root like every command (``--root`` and ``--bundle`` replay a host) and
changes nothing. Text for a terminal (ASCII when the stream cannot encode box drawing),
Mermaid for Markdown, JSON (``strata-doctor/map/v1``) for programs.
"""

from __future__ import annotations

from typing import Any

import click

from strata_doctor.cli.options import (
    UsageFailure,
    ascii_only,
    host_from_kwargs,
    host_options,
    open_host,
    terminal_width,
)


@click.command("map")
@host_options
@click.option("--format", "fmt", type=click.Choice(["text", "mermaid", "json"]), default="text",
              show_default=True, help="mermaid: a flowchart for Markdown (GitHub, GitLab).")
def map_command(fmt: str, **kwargs: Any) -> None:
    """Draw this host: NUMA nodes, GPUs, where the engine runs and where a fix puts it."""
    from strata_doctor.api import PlanError
    from strata_doctor.output import map as render_map
    from strata_doctor.output.hostmap import build_map
    from strata_doctor.output.map_json import to_json
    from strata_doctor.output.map_mermaid import to_mermaid

    _, ctx = open_host(host_from_kwargs(kwargs))
    try:
        host = build_map(ctx)  # GPU names: nvidia-smi's query, read through ctx
    except PlanError as exc:
        raise UsageFailure(str(exc)) from None
    if fmt == "json":
        click.echo(to_json(host), nl=False)
    elif fmt == "mermaid":
        click.echo(to_mermaid(host), nl=False)
    else:  # box drawing in ASCII where the stream lacks it; fitted to a terminal's width
        click.echo(render_map.to_text(host, ascii_only(), terminal_width()), nl=False)


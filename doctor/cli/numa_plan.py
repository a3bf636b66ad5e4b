"""``strata-doctor numa-plan``: the binding a launcher should use, as text, JSON or a prefix.

``$(strata-doctor numa-plan --format shell) python serve/server.py ...`` runs the engine
under ``numactl --preferred=N --cpunodebind=N`` on a multi-node host (``--physcpubind=`` with
the plan's CPUs where it leaves isolated CPUs out), and unchanged where there is nothing
to bind (``--numa off``, one node, no GPU).
"""

from __future__ import annotations

import json
import shlex
from typing import Any, Dict

import click

from strata_doctor.api import NumaPlan, PlanError, plan_for_context
from strata_doctor.cli.options import UsageFailure, host_from_kwargs, host_options, open_host
from strata_doctor.facts.parse import format_nodes

SCHEMA = "strata-doctor/numa-plan/v1"


@click.command("numa-plan")
@host_options
@click.option("--format", "fmt", type=click.Choice(["text", "json", "shell"]), default="text",
              show_default=True, help="shell: only the numactl prefix, shell-quoted (empty when none).")
def numa_plan_command(fmt: str, **kwargs: Any) -> None:
    """Print where the engine should run: node, CPUs, memory policy and numactl prefix."""
    _, ctx = open_host(host_from_kwargs(kwargs))
    try:
        plan = plan_for_context(ctx, choose="pass --numa <node> or set `numa: <node>` in the config")
    except PlanError as exc:
        raise UsageFailure(str(exc)) from None
    if fmt == "shell":
        if plan.numactl:
            click.echo(shlex.join(plan.numactl))
    elif fmt == "json":
        click.echo(json.dumps(numa_plan_data(plan), indent=2, sort_keys=True))
    else:
        click.echo(numa_plan_text(plan), nl=False)


def numa_plan_data(plan: NumaPlan) -> Dict[str, Any]:
    """The plan as JSON data (schema ``strata-doctor/numa-plan/v1``)."""
    return {
        "schema": SCHEMA,
        "node": plan.node,
        "nodes": list(plan.nodes),
        "cpu_nodes": list(plan.cpu_nodes),
        "cpus": list(plan.cpus),
        "cpulist": plan.cpulist,
        "policy": plan.policy,
        "numactl": list(plan.numactl),
        "gpu": plan.gpu,
        "gpu_node": plan.gpu_node,
        "reasons": list(plan.reasons),
    }


def numa_plan_text(plan: NumaPlan) -> str:
    """Three parts for people: the binding, the prefix, the reasons."""
    if plan.binds:
        head = [f"bind to {format_nodes(plan.nodes)}: CPUs {plan.cpulist}, memory policy {plan.policy}",
                f"prefix: {shlex.join(plan.numactl)}"]
    else:
        head = ["no binding: run the engine as it is"]
    return "\n".join(head + [f"  - {reason}" for reason in plan.reasons]) + "\n"

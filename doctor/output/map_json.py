"""The host map as JSON (``strata-doctor/map/v1``, docs/json-schema.md): a
:class:`~strata_doctor.output.hostmap.HostMap` in, plain data out."""

from __future__ import annotations

import json
from typing import Any, Dict

from strata_doctor import __version__
from strata_doctor.facts.parse import format_cpulist
from strata_doctor.output.hostmap import HostMap

SCHEMA = "strata-doctor/map/v1"


def to_json_data(host: HostMap) -> Dict[str, Any]:
    """The map as plain data (``strata-doctor/map/v1``)."""
    engine, plan, arena = host.engine, host.plan, host.arena
    return {
        "schema": SCHEMA,
        "version": __version__,
        "sockets": host.sockets,
        "cpus": host.cpus,
        "memory_total_bytes": host.memory_total,
        "nodes": [
            {
                "id": n.id,
                "socket": n.socket,
                "cpus": format_cpulist(n.cpus),
                "cores": n.cores,
                "threads": len(n.cpus),
                "memory_total_bytes": n.memory_total,
                "memory_free_bytes": n.memory_free,
                "memory_only": n.memory_only,
                "distances": {str(other): d for other, d in n.distances},
                "gpus": [g.address for g in host.gpus if g.node == n.id],
                "engine": None if n.engine_bytes is None else {
                    "cpus": format_cpulist(n.engine_cpus), "memory_bytes": n.engine_bytes},
                "plan": {"arena": n.arena, "pool": n.pool},
            }
            for n in host.nodes
        ],
        "gpus": [
            {"address": g.address, "model": g.model, "ids": g.ids, "node": g.node,
             "node_source": g.node_source, "link": g.link, "compute": g.compute,
             "boot_display": g.boot_display, "management": g.management}
            for g in host.gpus
        ],
        "engine": {
            "unit": engine.unit,
            "state": engine.state,
            "pid": engine.pid,
            "source": engine.source,
            "cpus": format_cpulist(engine.cpus) if engine.cpus else None,
            "memory": engine.memory,
            "memory_by_node": {str(n): size for n, size in engine.memory_by_node},
            "follows_plan": engine.follows_plan,
            "configured": engine.configured,
        },
        "plan": {
            "binds": plan.binds,
            "nodes": list(plan.nodes),
            "cpu_nodes": list(plan.cpu_nodes),
            "cpus": plan.cpulist,
            "policy": plan.policy,
            "numactl": list(plan.numactl),
            "reasons": list(plan.reasons),
        },
        "arena": None if arena is None else {
            "arena_bytes": arena.arena_bytes,
            "kv_bytes": arena.kv_bytes,
            "pinned_bytes": arena.pinned_bytes,
            "headroom_bytes": arena.headroom_bytes,
            "nodes": arena.nodes,
            "total_bytes": arena.total_bytes,
            "spare_bytes": arena.spare_bytes,
        },
        "fix": {
            "summary": host.fix,
            "changes": [{"what": c.what, "now": c.now, "after": c.after} for c in host.changes],
        },
    }


def to_json(host: HostMap) -> str:
    """Serialised with sorted keys, so equal hosts give equal bytes."""
    return json.dumps(to_json_data(host), indent=2, sort_keys=True) + "\n"

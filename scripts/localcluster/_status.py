"""``status``: the processes, the etcd members, the nodes with their clock skew, the partition
owners with their epochs, and the workers; what is wrong, listed last.

The exit status is 0 when nothing is wrong, 1 otherwise (so a script can wait on it).
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Sequence
from typing import Any

from localcluster import _etcd, _schedd
from localcluster._config import ClusterConfig, recorded
from localcluster._procs import Daemon


def _processes(config: ClusterConfig) -> list[dict[str, Any]]:
    groups: list[tuple[str, list[Daemon]]] = [
        ("etcd", _etcd.daemons(config)),
        ("node", _schedd.node_daemons(config)),
        ("worker", _schedd.worker_daemons(config)),
    ]
    return [
        {"kind": kind, "name": d.name, "pid": d.pid(), "log": str(d.log_file)}
        for kind, daemons in groups
        for d in daemons
    ]


def _skew(offsets: dict[str, int]) -> dict[str, int]:
    """Each node's offset from the median of all nodes' clocks (what a node's own skew check
    compares against its limit)."""
    if not offsets:
        return {}
    median = statistics.median_low(offsets.values())
    return {node: off - median for node, off in offsets.items()}


def gather(config: ClusterConfig, *, measure_skew: bool = True) -> dict[str, Any]:
    """Everything ``status`` shows, as one JSON-friendly dict (``problems`` last)."""
    problems: list[str] = []
    processes = _processes(config)
    problems += [f"{p['kind']} {p['name']} is not running" for p in processes if p["pid"] is None]

    members: list[dict[str, Any]] = []
    try:
        views = _etcd.members(config.etcd_endpoints, context=_etcd.client_context(config))
        members = [v.to_dict() for v in views]
        problems += [f"etcd member {v.name} is not healthy" for v in views if not v.healthy]
        if len(views) != config.etcd_members:
            problems.append(f"etcd lists {len(views)} members, expected {config.etcd_members}")
    except _etcd.EtcdUnreachable as exc:
        problems.append(f"no etcd member answers ({exc})")

    view = _schedd.ClusterView(_schedd.ask_nodes(config))
    problems += [f"node {a.node} ({a.address}) does not answer: {a.error}" for a in view.answers
                 if a.status is None]  # fmt: skip
    live = {str(n.get("node_id")) for n in view.live_nodes}
    if view.first:
        problems += [f"node {n} is not live in etcd" for n in config.node_names if n not in live]
    unowned = view.unowned()
    if unowned:
        problems.append(f"partitions without an owner: {unowned}")
    if view.first and not _schedd.is_balanced(view):
        problems.append(f"ownership not settled: partitions per node {_schedd.shares(view)}")
    workers = view.workers()
    for w in config.worker_names:
        missing = sorted(set(config.node_names) - workers.get(w, set()))
        if missing:
            problems.append(f"worker {w} has no stream to {', '.join(missing)}")

    offsets: dict[str, int] = {}
    if measure_skew and members:
        try:
            offsets = _etcd.clock_offsets(
                config.etcd_endpoints, config.prefix, context=_etcd.client_context(config)
            )
        except _etcd.EtcdUnreachable as exc:
            problems.append(f"clock skew not measured ({exc})")
    skew = _skew(offsets)
    problems += [
        f"node {n} clock is {s:+d} ms from the median (limit {config.max_clock_skew_ms} ms)"
        for n, s in sorted(skew.items())
        if abs(s) > config.max_clock_skew_ms
    ]
    return {
        "dir": str(config.dir),
        "processes": processes,
        "etcd": {"endpoints": config.etcd_endpoints, "members": members},
        "cluster": view.first,
        "workers": {w: sorted(nodes) for w, nodes in sorted(workers.items())},
        "clock_offset_ms": offsets,
        "clock_skew_ms": skew,
        "max_clock_skew_ms": config.max_clock_skew_ms,
        "problems": problems,
    }


def _table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> list[str]:
    cells = [[str(c) for c in header]] + [[str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    return ["  " + "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
            for r in cells]  # fmt: skip


def _size(n: int) -> str:
    return f"{n / 1_048_576:.1f} MiB" if n >= 1_048_576 else f"{n / 1024:.0f} KiB"


def render(status: dict[str, Any]) -> str:
    """The status as text, one section per part."""
    out: list[str] = [f"local cluster in {status['dir']}", "", "processes"]
    out += _table(
        ("KIND", "NAME", "PID"),
        [(p["kind"], p["name"], p["pid"] or "not running") for p in status["processes"]],
    )
    out += ["", "etcd members"]
    out += _table(
        ("NAME", "ID", "CLIENT URL", "HEALTH", "LEADER", "VERSION", "DB SIZE", "IN USE", "TERM"),
        [
            (
                m["name"],
                m["member_id"],
                ",".join(m["client_urls"]),
                "healthy" if m["healthy"] else f"unhealthy {m['error']}".strip(),
                "leader" if m["leader"] else "-",
                m["version"] or "-",
                _size(m["db_size"]) if m["reachable"] else "-",
                _size(m["db_size_in_use"]) if m["reachable"] else "-",
                m["raft_term"] or "-",
            )
            for m in status["etcd"]["members"]
        ],
    )
    cluster = status["cluster"]
    skew, offsets = status["clock_skew_ms"], status["clock_offset_ms"]
    out += ["", f"nodes (clock skew: from the median of the nodes' clocks, limit "
                f"{status['max_clock_skew_ms']} ms; offset: from this host's clock)"]  # fmt: skip
    out += _table(
        ("NODE", "ADDRESS", "PARTITIONS", "SKEW", "OFFSET"),
        [
            (
                n["node_id"],
                n["address"],
                n["partitions_owned"],
                f"{skew[n['node_id']]:+d} ms" if n["node_id"] in skew else "-",
                f"{offsets[n['node_id']]:+d} ms" if n["node_id"] in offsets else "-",
            )
            for n in cluster.get("nodes", [])
        ],
    )
    parts = cluster.get("partitions", [])
    owned = sum(1 for p in parts if p.get("owner"))
    out += ["", f"partitions ({owned} of {cluster.get('partition_count', 0)} owned)"]
    out += _table(
        ("PARTITION", "OWNER", "EPOCH"),
        [(p.get("partition", 0), p.get("owner") or "(none)", p.get("epoch", 0)) for p in parts],
    )
    out += ["", "workers (streams to nodes)"]
    out += _table(
        ("WORKER", "CONNECTED TO"),
        [(w, ", ".join(nodes)) for w, nodes in status["workers"].items()],
    )
    out.append("")
    if status["problems"]:
        out.append("problems")
        out += [f"  - {p}" for p in status["problems"]]
    else:
        out.append("no problems: every member healthy, every partition owned, every worker "
                   "connected to every node")  # fmt: skip
    return "\n".join(out)


def status(config: ClusterConfig, *, as_json: bool, measure_skew: bool) -> int:
    """Prints the status of the cluster in ``config.dir``; returns the exit code."""
    running = recorded(config)
    if running is None:
        message = f"no cluster in {config.dir} (scripts/cluster-up starts one)"
        if as_json:
            print(json.dumps({"dir": str(config.dir), "problems": [message]}, indent=2))
        else:
            print(message)
        return 1
    result = gather(running, measure_skew=measure_skew)
    print(json.dumps(result, indent=2) if as_json else render(result))
    return 1 if result["problems"] else 0

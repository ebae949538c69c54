"""Cluster benchmark: 3 ``schedd node`` and 2 ``schedd worker`` processes over a real etcd.

    .venv/bin/python scripts/bench/cluster.py [--quick] [--jobs 100000] [--rate 1000]
        [--sizes 10000,100000,1000000] [--kills 5] [--duration 20] [--session-ttl 5]

One fresh etcd (one member), 48 partitions, per-second jobs (``--rate`` of them, so that many
fires/s, spread over each second by a 1 s jitter, ``catch_up`` misfires so every fire must run)
and idle jobs filling the store to each size. In order:

1. etcd's own write ceiling with this client, before any node runs (the baseline);
2. for each stored size, smallest first: fill the store; node RSS; at ``--jobs`` the sustained
   window (fires/s, lateness, node CPU-µs and etcd writes per fire) and ``--kills`` SIGKILLs,
   at other sizes one; each kill times the takeover and the fires it delayed, then starts
   the node again and times its join (the rebalance);
3. every expected fire of every per-second job started exactly once (none lost or doubled).

A human summary goes to stderr; the last stdout line is one JSON object
``{"bench": "cluster", ..., "ratios": {...}, "projection": {...}, "targets": {...}}``.
See docs/performance.md ("Cluster") for the method and the cost model.
"""

from __future__ import annotations

import argparse
import atexit
import itertools
import json
import math
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _e2e_common import say

NODES = ["n0", "n1", "n2"]
WORKERS = ["w0", "w1"]
JITTER_MS = 1000


def _count(text: str) -> int:
    """``10000``, ``10k`` or ``1M``."""
    text = text.strip()
    scale = {"k": 1000, "m": 1_000_000}.get(text[-1:].lower(), 1)
    return int(float(text[:-1] if scale > 1 else text) * scale)


def _sizes(text: str) -> list[int]:
    try:
        sizes = sorted({_count(x) for x in text.split(",") if x.strip()})
    except ValueError:
        sizes = []
    if not sizes or sizes[0] <= 0:
        raise SystemExit(f"--sizes: comma-separated job counts such as 10k,100k,1M, got {text!r}")
    return sizes


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--quick", action="store_true", help="small sizes, a few-minute smoke run")
    ap.add_argument("--jobs", type=int, help="jobs stored during the sustained window (100000)")
    ap.add_argument("--rate", type=int, help="per-second jobs, i.e. fires/s (1000)")
    ap.add_argument("--sizes", help="stored sizes for takeover/RSS (10000,100000,1000000)")
    ap.add_argument("--kills", type=int, help="SIGKILLs at --jobs (5)")
    ap.add_argument("--duration", type=int, help="sustained window in seconds (20)")
    ap.add_argument("--partitions", type=int, default=48)
    ap.add_argument("--session-ttl", type=int, default=5, help="node lease TTL in seconds")
    ap.add_argument("--fill-procs", type=int, default=2, help="parallel store fillers")
    ap.add_argument("--ceiling-s", type=float, help="seconds per etcd ceiling test (5)")
    ap.add_argument("--keep", action="store_true", help="keep the data directories and logs")
    args = ap.parse_args()
    quick = {"jobs": 2000, "rate": 200, "sizes": "2000,10000", "kills": 1, "duration": 5,
             "ceiling_s": 2.0}  # fmt: skip
    full = {"jobs": 100_000, "rate": 1000, "sizes": "10000,100000,1000000", "kills": 5,
            "duration": 20, "ceiling_s": 5.0}  # fmt: skip
    for key, value in (quick if args.quick else full).items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    args.sizes = _sizes(args.sizes)
    if args.partitions % len(NODES):
        raise SystemExit(f"--partitions: a multiple of {len(NODES)}, got {args.partitions}")
    if args.jobs < args.rate:
        raise SystemExit(f"--jobs: at least --rate ({args.rate}), got {args.jobs}")
    return args


def _stage(run: Any, size: int, args: argparse.Namespace, victims: Any) -> dict[str, Any]:
    from _cluster_phases import fill, kill_cycle, sustained
    from _e2e_cluster import rss_mib

    c = run.cluster
    filled = fill(run, size, args.fill_procs, max(0, run.stored - args.rate))
    say(f"  stored {run.stored} jobs (fill {filled})")
    time.sleep(3.0)  # the owners have taken the notices of the last creations
    out: dict[str, Any] = {
        "stored_jobs": run.stored,
        "fill": filled,
        "rss_mib": {n: rss_mib(c.nodes[n].pid) for n in c.alive()},
    }
    if size == args.jobs:
        out["sustained"] = s = sustained(run, args.duration, args.rate, run.idle_node_cores)
        say(f"  sustained: {s}")
    kills = args.kills if size == args.jobs else (1 if size in args.sizes else 0)
    out["kills"] = []
    for _ in range(kills):
        k = kill_cycle(run, next(victims))
        say(f"  kill: {k}")
        out["kills"].append(k)
    return out


def summarize(
    stages: list[dict[str, Any]],
    ceiling: dict[str, Any],
    verified: dict[str, Any],
    args: Any,
    low: dict[str, Any],
) -> dict[str, Any]:
    from _cluster_phases import median

    main = next(s for s in stages if s["stored_jobs"] >= args.jobs and "sustained" in s)
    sus = main["sustained"]
    kills = main["kills"]
    ttl = args.session_ttl
    failover = {
        "kills": len(kills),
        "session_ttl_s": ttl,
        "p50_s": median(k["failover_s"] for k in kills),
        "max_s": max((k["failover_s"] for k in kills), default=None),
        "owned_again_p50_s": median(k["owned_again_s"] for k in kills),
        "orphan_fires_late_p50_ms": median(k["orphan_fires_late_ms"]["p50"] for k in kills),
        "orphan_fires_late_max_ms": max(
            (k["orphan_fires_late_ms"]["max"] or 0 for k in kills), default=None
        ),
    }
    joins = [k["join"] for s in stages for k in s["kills"]]
    rebalance = {
        "joins": len(joins),
        "share": joins[0]["share"] if joins else None,
        "startup_p50_s": median(j["startup_s"] for j in joins),
        "owned_share_p50_s": median(j["owned_share_s"] for j in joins),
        "owned_share_max_s": max((j["owned_share_s"] for j in joins), default=None),
        "fired_all_p50_s": median(j["fired_all_s"] for j in joins),
        "fired_all_max_s": max((j["fired_all_s"] for j in joins), default=None),
        "moved_fires_late_max_ms": max(
            (j["moved_fires_late_ms"]["max"] or 0 for j in joins), default=None
        ),
    }
    sizes = []
    for s in stages:
        if not s["kills"]:
            continue
        ks = s["kills"]
        sizes.append({
            "stored_jobs": s["stored_jobs"],
            "fill_jobs_per_s": s["fill"].get("jobs_per_s"),
            "node_rss_mib_max": max(s["rss_mib"].values()),
            "restarted_node_rss_mib": median(k["join"]["rss_mib_after"] for k in ks),
            "takeover_failover_s": median(k["failover_s"] for k in ks),
            "takeover_window_load_ms_p50": median(k["window_load_ms"]["p50"] for k in ks),
            "takeover_window_load_ms_max": max(
                (k["window_load_ms"]["max"] or 0 for k in ks), default=None
            ),
            "takeover_due_entries_loaded": median(k["due_entries_loaded"] for k in ks),
            "join_fired_all_s": median(k["join"]["fired_all_s"] for k in ks),
        })  # fmt: skip
    # Node CPU (cores, all nodes) = a + b * fires/s, b from the two rates, a what is left of
    # it at the full rate; one node's core then fires (1 - a / nodes) / b per second.
    span = sus["fires"] - low["fires"]
    b_us = (sus["node_cpu_s"] - low["node_cpu_s"]) * 1e6 / span if span > 0 else 0.0
    if b_us <= 0:  # too little load to tell apart from the noise
        b_us = sus["node_cpu_us_per_fire"]
    a_cores = max(0.0, sus["node_cpu_s"] / sus["duration_s"] - b_us * sus["fires_per_s"] / 1e6)
    cost_model = {
        "node_cpu_us_per_fire_slope": round(b_us, 1),
        "node_fixed_cores": round(a_cores, 3),
        "node_idle_cores": sus["node_idle_cores"],
        "low_rate": low["rate"],
        "low_rate_node_cpu_us_per_fire": low["node_cpu_us_per_fire"],
        "low_rate_etcd_write_txns_per_fire": low["etcd_write_txns_per_fire"],
    }
    node_core = (1.0 - a_cores / len(NODES)) * 1e6 / b_us if b_us else None
    by_keys = (
        ceiling["batched_key_writes_per_s"] / sus["etcd_key_writes_per_fire"]
        if sus["etcd_key_writes_per_fire"]
        else None
    )
    by_txns = (
        ceiling["single_item_txns_per_s"] / sus["etcd_write_txns_per_fire"]
        if sus["etcd_write_txns_per_fire"]
        else None
    )
    projection: dict[str, Any] = {
        **cost_model,
        "node_fires_per_core_s": round(node_core) if node_core else None,
        "etcd_fires_per_s_by_key_writes": round(by_keys) if by_keys else None,
        "etcd_fires_per_s_by_txns_at_this_batching": round(by_txns) if by_txns else None,
    }
    if node_core and by_keys:
        projection["nodes_to_reach_etcd_ceiling"] = math.ceil(by_keys / node_core)
        for n in (1, 3, 5, 10):
            projection[f"capacity_{n}_nodes_fires_per_s"] = round(min(n * node_core, by_keys))
    ratios: dict[str, Any] = {
        "failover_max_over_ttl": round(failover["max_s"] / ttl, 3) if failover["max_s"] else None,
        "sustained_txns_over_etcd_single_item_ceiling": round(
            sus["etcd_write_txns_per_s"] / ceiling["single_item_txns_per_s"], 4
        ),
        "sustained_key_writes_over_etcd_batched_ceiling": round(
            sus["etcd_key_writes_per_s"] / ceiling["batched_key_writes_per_s"], 4
        ),
    }
    if len(sizes) >= 2:
        lo, hi = sizes[0], sizes[-1]
        ratios["store_growth"] = round(hi["stored_jobs"] / lo["stored_jobs"], 1)
        if lo["takeover_window_load_ms_max"]:
            ratios["window_load_largest_over_smallest"] = round(
                hi["takeover_window_load_ms_max"] / lo["takeover_window_load_ms_max"], 2
            )
        ratios["restarted_rss_largest_over_smallest"] = round(
            hi["restarted_node_rss_mib"] / lo["restarted_node_rss_mib"], 2
        )
    targets = {
        "failover_le_ttl_plus_1s": bool(failover["max_s"] is not None
                                        and failover["max_s"] <= ttl + 1.0),
        "none_lost_or_doubled": verified["lost"] == 0 and verified["doubled"] == 0,
        "none_lost": verified["lost"] == 0,
        "no_double_without_an_owner_change": verified["doubled_unexplained"] == 0,
        "sustained_all_fired": sus["fires"] >= sus["expected"],
    }  # fmt: skip
    return {
        "sustained": sus,
        "failover": failover,
        "rebalance": rebalance,
        "sizes": sizes,
        "verify": verified,
        "ratios": ratios,
        "projection": projection,
        "targets": targets,
    }


def run_all(args: argparse.Namespace, root: Path, children: Any) -> dict[str, Any]:
    from _cluster_phases import (
        Run,
        create_per_second,
        etcd_ceiling,
        etcd_counters,
        idle_node_cores,
        sustained,
        verify,
    )
    from _cluster_procs import BenchCluster, Records

    from schedd.dev import EtcdProcess

    etcd = EtcdProcess(root / "etcd")
    children.etcds.append(etcd)
    etcd.start()
    assert etcd.proc is not None
    say(f"cluster: etcd at {etcd.endpoint}; measuring its write ceiling")
    ceiling = etcd_ceiling(etcd.endpoint, args.ceiling_s)
    say(f"  etcd ceiling: {ceiling}")
    cluster = BenchCluster(
        root, children, etcd.endpoint, partitions=args.partitions,
        session_ttl_s=args.session_ttl, jitter_ms=JITTER_MS,
    )  # fmt: skip
    try:
        for n in NODES:
            cluster.start_node(n)
        cluster.wait_balanced(NODES)
        for w in WORKERS:
            cluster.start_worker(w)
        cluster.wait_workers()
        run = Run(cluster, Records([cluster.record_path(w) for w in WORKERS]), etcd.proc.pid)
        m0 = etcd_counters(etcd.endpoint)
        run.idle_node_cores = idle_node_cores(run, 3.0)
        bg = (etcd_counters(etcd.endpoint)["revision"] - m0["revision"]) / 3.0
        low = max(1, args.rate // 4)
        create_per_second(run, cluster.client("n0"), low, JITTER_MS)
        time.sleep(2.0)
        sustained_low = sustained(run, args.duration, low, run.idle_node_cores)
        say(f"  sustained at a quarter of the rate: {sustained_low}")
        took = create_per_second(run, cluster.client("n0"), args.rate - low, JITTER_MS)
        say(f"  cluster up; {args.rate} per-second jobs in all ({took:.1f}s for the rest)")
        victims = itertools.cycle(["n1", "n2", "n0"])
        stages = [_stage(run, size, args, victims) for size in sorted({*args.sizes, args.jobs})]
        time.sleep(3.0)
        verified = verify(run, (math.floor(time.time()) - 3) * 1000)
        say(f"  verify: {verified}")
    finally:
        cluster.close()
    out = summarize(stages, ceiling, verified, args, sustained_low)
    out["etcd_ceiling"] = ceiling
    out["etcd_background_revisions_per_s"] = round(bg, 1)
    out["stages"] = stages
    return out


def _print_summary(out: dict[str, Any]) -> None:
    s, f, r = out["sustained"], out["failover"], out["rebalance"]
    say(
        f"sustained {s['fires_per_s']}/s with {s['stored_jobs']} stored: late p50 "
        f"{s['late_p50_ms']} p99 {s['late_p99_ms']} max {s['late_max_ms']} ms; node CPU "
        f"{s['node_cpu_us_per_fire']} µs/fire ({s['node_cpu_us_per_fire_marginal']} above idle);"
        f" etcd {s['etcd_write_txns_per_fire']} write "
        f"txns, {s['etcd_key_writes_per_fire']} key writes per fire"
    )
    say(
        f"failover ({f['kills']} kills, TTL {f['session_ttl_s']}s): p50 {f['p50_s']}s max "
        f"{f['max_s']}s; orphaned fires late p50 {f['orphan_fires_late_p50_ms']} max "
        f"{f['orphan_fires_late_max_ms']} ms"
    )
    say(
        f"rebalance ({r['joins']} joins, share {r['share']}): owned p50 {r['owned_share_p50_s']}s"
        f", fired in all p50 {r['fired_all_p50_s']}s max {r['fired_all_max_s']}s"
    )
    say("stored     fill/s  rss MiB  rss restarted  failover s  load ms p50/max  entries  join s")
    for z in out["sizes"]:
        say(
            f"{z['stored_jobs']:>8} {z['fill_jobs_per_s'] or '-':>8} {z['node_rss_mib_max']:>8}"
            f" {z['restarted_node_rss_mib']:>14} {z['takeover_failover_s']:>11}"
            f" {z['takeover_window_load_ms_p50']:>7}/{z['takeover_window_load_ms_max']:<7}"
            f" {z['takeover_due_entries_loaded']:>8}"
            f" {z['join_fired_all_s']:>7}"
        )
    say(f"verify: {out['verify']}")
    say(f"ratios: {out['ratios']}")
    say(f"projection: {out['projection']}")
    say(f"targets: {out['targets']}")


def main() -> int:
    args = parse_args()
    from _e2e_cluster import Children

    children = Children()
    atexit.register(children.stop_all)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: sys.exit(130))
    root = Path(tempfile.mkdtemp(prefix="schedd-cluster-"))
    t0 = time.monotonic()
    say(
        f"cluster: {len(NODES)} nodes, {len(WORKERS)} workers, P={args.partitions}, rate "
        f"{args.rate}/s, jobs {args.jobs}, sizes {args.sizes}, kills {args.kills}; data in {root}"
    )
    try:
        out = run_all(args, root, children)
    except Exception as exc:
        # One JSON line still, naming what failed; --keep keeps the logs to read.
        say(f"cluster: FAILED after {time.monotonic() - t0:.0f}s: {type(exc).__name__}: {exc}")
        tails = {p.stem: p.read_text(errors="replace")[-600:] for p in root.glob("n*.log")}
        print(json.dumps({"bench": "cluster", "quick": args.quick, "error": str(exc)[:1000],
                          "node_log_tails": tails}))  # fmt: skip
        return 1
    finally:
        children.stop_all()
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    _print_summary(out)
    say(f"cluster: done in {time.monotonic() - t0:.0f}s")
    config = {k: getattr(args, k) for k in ("jobs", "rate", "sizes", "kills", "duration")}
    config |= {"partitions": args.partitions, "session_ttl_s": args.session_ttl}
    print(json.dumps({"bench": "cluster", "quick": args.quick, "config": config, **out}))
    return 0


if __name__ == "__main__":
    sys.exit(main())

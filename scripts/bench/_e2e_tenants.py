"""The e2e benchmark's ``tenants`` workload: a herd from one tenant under its rate limit next to
a small tenant with no limit, against that small tenant alone (the baseline, same run).

1. **alone**: on a fresh cluster, tenant B's ``small`` one-shot jobs (200; 100 ``--quick``)
   all due at one second T. B's p99 lateness here is its unthrottled figure.
2. **herd**: on a fresh cluster, tenant A gets ``schedctl tenant set A --rate R --burst 200``
   (R = 2000/s; 1000 ``--quick``); A's ``herd`` one-shot jobs (20k; 4k ``--quick``) and B's
   ``small`` jobs are all due at T. Measured: B's p99 lateness (target: within its alone
   figure + 20 ms), A's rate (the starts after the burst over the time they took; target
   R ± 10%), and every fire of both started exactly once (lost, dup).
3. **unlimited herd** (what the limit buys B): the same herd with no limit; B's p99 here is
   what it would suffer without one (``b_with_unlimited_herd_p99_ms``).

Lateness is from the scheduled instant to the no-op handler's start, as everywhere in e2e.
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

from _e2e_cluster import Children, Cluster, StartLog
from _e2e_common import Result, Workload, lateness_stats, say

from schedd.client import Client, build_job

CHUNK = 2000
BURST = 200
RECORD_LAG_S = 2.5
#: B with the herd may be this much later than alone at p99 and still "within" its figure.
B_SLACK_MS = 20.0


def _create(client: Client, tenant: str, n: int, schedule: str) -> set[str]:
    ids: set[str] = set()
    for start in range(0, n, CHUNK):
        jobs = [
            build_job(
                f"{tenant}-{start + i}", schedule=schedule, handler="noop", tenant=tenant,
                max_attempts=1,
            )
            for i in range(min(CHUNK, n - start))
        ]  # fmt: skip
        for outcome in client.create_jobs(jobs):
            if isinstance(outcome, Exception):
                raise RuntimeError(f"create failed: {outcome}") from outcome
            ids.add(outcome.id)
    return ids


def _at(t: int) -> str:
    return "@at " + time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


def _collect(cluster: Cluster, expected: int, timeout_s: float) -> StartLog:
    log = StartLog(cluster.record)
    deadline = time.monotonic() + timeout_s
    while log.poll() < expected and time.monotonic() < deadline:
        time.sleep(0.5)
    time.sleep(RECORD_LAG_S)  # anything started twice is written by now too
    log.poll()
    return log


def _starts(log: StartLog, ids: set[str]) -> tuple[list[tuple[int, int]], int]:
    """(scheduled ms, first start ns) of the starts of these jobs, and how many repeated."""
    first: dict[str, tuple[int, int]] = {}
    dup = 0
    for eid, due_ms, ns in log.records():
        if eid.rpartition("@")[0] not in ids:
            continue
        if eid in first:
            dup += 1
        else:
            first[eid] = (due_ms, ns)
    return list(first.values()), dup


def run_tenants(
    w: Workload, root: Path, children: Children, capacity: int, prefetch: int, quick: bool
) -> Result:
    herd_n, small_n, rate = (4000, 100, 1000.0) if quick else (20_000, 200, 2000.0)
    res = Result("schedd", w.name, herd_n + small_n)
    res.extra.update(herd_jobs=herd_n, small_jobs=small_n, rate_limit=rate, burst=BURST)
    try:
        alone = _phase(root / "alone", children, capacity, prefetch, 0, small_n, rate)
        res.extra["b_alone_p99_ms"] = alone["b"]["p99_ms"]
        res.extra["b_alone_lost"] = alone["b_lost"]
        herd = _phase(root / "herd", children, capacity, prefetch, herd_n, small_n, rate)
        free = _phase(root / "free", children, capacity, prefetch, herd_n, small_n, 0.0)
        res.extra["b_with_unlimited_herd_p99_ms"] = free["b"]["p99_ms"]
        res.extra["a_unlimited_p99_ms"] = free["a"]["p99_ms"]
    except Exception as exc:
        res.error = f"{type(exc).__name__}: {exc}"[:500]
        return res
    b, a = herd["b"], herd["a"]
    res.extra.update(
        b_with_herd_p99_ms=b["p99_ms"],
        b_with_herd_max_ms=b["max_ms"],
        a_p50_ms=a["p50_ms"],
        a_max_ms=a["max_ms"],
        a_rate_per_s=herd["a_rate"],
        a_rate_over_limit=round(herd["a_rate"] / rate, 3) if herd["a_rate"] else None,
        a_lost=herd["a_lost"],
        b_lost=herd["b_lost"],
        dup=herd["dup"],
    )
    res.p50_ms, res.p99_ms, res.max_ms = b["p50_ms"], b["p99_ms"], b["max_ms"]
    res.lost = herd["a_lost"] + herd["b_lost"] + alone["b_lost"]
    res.fires_per_s = herd["a_rate"]
    b_alone, b_herd = alone["b"]["p99_ms"], b["p99_ms"]
    res.extra["b_within_alone"] = (
        b_alone is not None and b_herd is not None and b_herd <= b_alone + B_SLACK_MS
    )
    ratio = res.extra["a_rate_over_limit"]
    res.extra["a_rate_within_10pct"] = ratio is not None and 0.9 <= ratio <= 1.1
    return res


def _phase(
    root: Path,
    children: Children,
    capacity: int,
    prefetch: int,
    herd_n: int,
    small_n: int,
    rate: float,
) -> dict[str, Any]:
    cluster = Cluster(root, children, capacity, prefetch=prefetch)
    try:
        cluster.start()
        with Client(cluster.address, timeout_s=120) as client:
            if herd_n and rate:
                client.set_tenant_limits("A", rate=rate, burst=BURST)
            t = math.ceil(time.time() + herd_n / 2500.0 + 6)
            a_ids = _create(client, "A", herd_n, _at(t)) if herd_n else set()
            b_ids = _create(client, "B", small_n, _at(t))
            if time.time() > t - 1:
                raise RuntimeError("creating the jobs overran T")
            limit = f"at {rate:g}/s" if rate else "unlimited"
            say(f"  tenants: A {herd_n} {limit}, B {small_n}, T+{t - time.time():.1f}s")
            spread_s = max(0.0, herd_n - BURST) / rate if rate else 0.0
            log = _collect(cluster, herd_n + small_n, spread_s + 30)
    finally:
        cluster.stop()
    a_starts, dup_a = _starts(log, a_ids)
    b_starts, dup_b = _starts(log, b_ids)
    out: dict[str, Any] = {
        "b": lateness_stats(ns / 1e6 - due for due, ns in b_starts),
        "a": lateness_stats(ns / 1e6 - due for due, ns in a_starts),
        "a_lost": herd_n - len(a_starts),
        "b_lost": small_n - len(b_starts),
        "dup": dup_a + dup_b,
        "a_rate": None,
    }
    if len(a_starts) > BURST + 1:
        ns = sorted(n for _due, n in a_starts)[BURST:]  # after the burst: the paced part
        took = (ns[-1] - ns[0]) / 1e9
        out["a_rate"] = round((len(ns) - 1) / took, 1) if took > 0 else None
    return out


def summarize(results: list[Result]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Ratios and targets of the ``tenants`` workload (none when it did not run)."""
    r = next((x for x in results if x.workload == "tenants" and not x.error), None)
    if r is None:
        return {}, {}
    x = r.extra
    alone, herd = x.get("b_alone_p99_ms"), x.get("b_with_herd_p99_ms")
    ratios = {
        "tenants_b_p99_with_herd_over_alone": round(herd / alone, 3) if alone and herd else None,
        "tenants_a_rate_over_limit": x.get("a_rate_over_limit"),
    }
    targets = {
        "tenants_b_p99_within_alone": bool(x.get("b_within_alone")),
        "tenants_a_rate_within_10pct": bool(x.get("a_rate_within_10pct")),
        "tenants_none_lost": r.lost == 0 and not x.get("dup"),
    }
    return ratios, targets

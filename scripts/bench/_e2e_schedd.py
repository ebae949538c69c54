"""The schedd side of the e2e benchmark: one workload on a fresh cluster, measured.

Method, per workload:
1. fresh etcd + node + worker (:class:`~_e2e_cluster.Cluster`), then 2 s idle to read the
   background etcd revision rate (lease-bound keys, registrations);
2. jobs created through ``Client.create_jobs`` in chunks; for a burst every job is
   ``@at T`` with T = now + n / (estimated create rate) * 2 + margin, rounded up to a second;
3. the etcd counters are read *after* creation (so job creation is excluded), and for bursts the
   runs/ keys are counted 250 ms before T: all n present means every claim was made ahead;
4. the worker's record file is followed until every expected execution started (bounded);
5. durable: etcd's runs/ keys are polled (count-only range) until none is left for the window;
   a finished execution's final write deletes its runs/ key, so 0 means every result committed;
6. etcd counters again: write transactions = revision delta (each write txn bumps it once),
   key writes = put + delete deltas, both per execution.
"""

from __future__ import annotations

import contextlib
import math
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from _e2e_cluster import Children, Cluster, EtcdProbe, StartLog, cpu_cost, etcd_metrics
from _e2e_common import Result, Workload, fires_per_s, lateness_stats, say, spread_offset_ms

from schedd.client import Client, build_job

CHUNK = 2000


class Estimates:
    """Carried between workloads: the job create rate measured so far."""

    def __init__(self) -> None:
        self.create_per_s = 4000.0  # measured 4.8k-9.7k/s on the project machine


def _at(ms: float) -> str:
    return "@at " + datetime.fromtimestamp(ms / 1000.0, UTC).isoformat(timespec="seconds")


def _create(client: Client, schedules: list[str], jitter_ms: int = 0, *, prefix: str) -> float:
    """Creates one no-op job per schedule, named ``{prefix}-{n}`` (a name is taken once per
    tenant); returns the seconds it took."""
    t0 = time.monotonic()
    jitter = f"{jitter_ms}ms" if jitter_ms else None
    for start in range(0, len(schedules), CHUNK):
        jobs = [
            build_job(
                f"{prefix}-{start + i}", schedule=s, handler="noop", max_attempts=1, jitter=jitter
            )
            for i, s in enumerate(schedules[start : start + CHUNK])
        ]
        for outcome in client.create_jobs(jobs):
            if isinstance(outcome, Exception):
                raise RuntimeError(f"create failed: {outcome}") from outcome
    return time.monotonic() - t0


def _wait_starts(log: StartLog, expected: int, deadline: float) -> int:
    seen = log.poll()
    while seen < expected and time.monotonic() < deadline:
        time.sleep(0.1)
        seen = log.poll()
    time.sleep(0.3)  # the recorder flushes every 100 ms: let duplicates, if any, land too
    return log.poll()


def _scheduled(execution_id: str) -> int:
    """The scheduled fire of an execution (its id is ``{job_id}@{scheduled_ms}``)."""
    return int(execution_id.rpartition("@")[2])


def _sleep_until(wall_s: float) -> None:
    time.sleep(max(0.0, wall_s - time.time()))


def _poll_zero(probe: Any, read: Any, timeout_s: float) -> float | None:
    """Seconds until ``read()`` returns 0 (None on timeout)."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout_s:
        if read() == 0:
            return time.monotonic() - t0
        time.sleep(0.1)
    return None


def _metrics(cluster: Cluster) -> dict[str, float]:
    """etcd's counters, or nothing on the embedded store (which has no outside view)."""
    return etcd_metrics(cluster.etcd.endpoint) if cluster.etcd is not None else {}


def _writes(cluster: Cluster, client: Client) -> dict[str, float]:
    """What the store has written: keys (created, changed, deleted) and write-ahead-log bytes;
    etcd's own counters, or what the node reports of its embedded store."""
    if cluster.etcd is not None:
        m = etcd_metrics(cluster.etcd.endpoint)
        return {"keys": m["put"] + m["delete"], "bytes": m["wal_bytes"]}
    nodes = client.cluster_status().nodes
    return {
        "keys": float(sum(n.store_keys_written for n in nodes)),
        "bytes": float(sum(n.store_bytes_written for n in nodes)),
    }


def _store_cost(res: Result, w0: dict[str, float], w1: dict[str, float], fires: int) -> None:
    if fires:
        res.store_keys_per_fire = round((w1["keys"] - w0["keys"]) / fires, 2)
        res.store_bytes_per_fire = round((w1["bytes"] - w0["bytes"]) / fires, 0)


def run_once(
    w: Workload,
    root: Path,
    children: Children,
    est: Estimates,
    capacity: int,
    margin_s: float,
    prefetch: int = 0,
    store: str = "etcd",
) -> Result:
    """One workload (burst, spread or sustained) on a fresh cluster; ``store`` etcd (system
    ``schedd``) or rocksdb (``schedd-rocksdb``: the node's embedded store, whose claims and
    run keys this process cannot see, so those counts stay unset)."""
    res = Result("schedd" if store == "etcd" else f"schedd-{store}", w.name, w.n)
    cluster = Cluster(
        root, children, capacity, jitter_ms=w.jitter_ms, prefetch=prefetch, store=store
    )
    probe = None
    try:
        cluster.start()
        if cluster.etcd is not None:
            probe = EtcdProbe(cluster.etcd.endpoint)
        with Client(cluster.address, timeout_s=120) as client:
            if cluster.etcd is not None:
                m = etcd_metrics(cluster.etcd.endpoint)
                time.sleep(2.0)
                bg = (etcd_metrics(cluster.etcd.endpoint)["revision"] - m["revision"]) / 2.0
                res.extra["etcd_bg_rev_per_s"] = round(bg, 1)
            else:
                time.sleep(2.0)
            if w.kind == "sustained":
                _sustained(w, client, cluster, probe, res, est)
            else:
                _one_shot(w, client, cluster, probe, res, est, margin_s)
    except Exception as exc:
        res.error = f"{type(exc).__name__}: {exc}"[:500]
        res.extra["node_log_tail"] = cluster.log_tail("node", 600)
    finally:
        if probe is not None:
            with contextlib.suppress(Exception):
                probe.close()
        cluster.stop()
    return res


def _one_shot(
    w: Workload,
    client: Client,
    cluster: Cluster,
    probe: EtcdProbe | None,
    res: Result,
    est: Estimates,
    margin_s: float,
) -> None:
    create_s = w.n / est.create_per_s * 2.0  # a big batch creates slower (claims run too)
    t_ms = math.ceil(time.time() + create_s + margin_s + w.n / 20_000) * 1000.0
    offsets = [
        spread_offset_ms(i, w.n, w.spread_s) if w.kind == "spread" else 0.0 for i in range(w.n)
    ]
    schedules = [_at(t_ms + off) for off in offsets]
    last_ms = t_ms + max(offsets) + w.jitter_ms
    rss0 = cluster.rss()
    far = max(CHUNK, w.n // 10)
    per_job = _creation_cost(client, cluster, far)
    rss1 = cluster.rss()
    for name in ("node", "etcd"):  # jobs stored, not due in the window
        res.extra[f"{name}_kib_per_stored_job"] = _kib_per(rss0, rss1, name, far)
    before, w_before = _metrics(cluster), _writes(cluster, client)
    took = _create(client, schedules, w.jitter_ms, prefix=w.name)
    est.create_per_s = w.n / took
    res.extra["create_per_s"] = round(w.n / took, 0)
    if time.time() * 1000.0 > t_ms - 1000:
        raise RuntimeError(f"creation ({took:.1f}s) overran the fire instant; raise --margin")
    say(
        f"  schedd {w.name}: created {w.n} jobs in {took:.1f}s;"
        f" fire in {(t_ms / 1000 - time.time()):.1f}s"
    )
    m0, w0 = _metrics(cluster), _writes(cluster, client)
    m0["_wall"] = time.time()
    c0 = cluster.cpu()
    # Claims may begin while jobs are still being created (a big burst is claimed long
    # ahead): the store's writes count from before creation, less creation's own cost as
    # measured above (so do etcd's counters when the probe saw such claims).
    for key in w0:
        w0[key] = w_before[key] + per_job[f"w_{key}"] * w.n
    early = probe.runs_count() if probe is not None else 0
    if early:
        res.extra["claimed_during_creation"] = early
        for key, cost in per_job.items():
            if key in before:
                m0[key] = before[key] + cost * w.n
    _sleep_until(t_ms / 1000.0 - 0.25)
    if probe is not None:
        res.extra["claimed_before_fire"] = probe.runs_count()
    rss2 = cluster.rss()  # every job claimed into the node's wheel and held by the worker
    res.extra["node_kib_per_claimed_fire"] = _kib_per(rss1, rss2, "node", w.n)
    res.extra["worker_kib_per_held_fire"] = _kib_per(rss1, rss2, "worker", w.n)
    log = StartLog(cluster.record)
    deadline = time.monotonic() + (last_ms / 1000.0 - time.time()) + 60 + w.n / 2000
    _wait_starts(log, w.n, deadline)
    durable = (
        _poll_zero(probe, probe.runs_count, max(30.0, w.n / 1000)) if probe is not None else None
    )
    end_wall = time.time()
    m1, w1 = _metrics(cluster), _writes(cluster, client)
    c1 = cluster.cpu()
    recs = log.records()
    sched = {eid: ms for eid, ms, _ in recs}
    first = {}
    for eid, _ms, ns in recs:
        first.setdefault(eid, ns)
    late = [first[e] / 1e6 - sched[e] for e in first]
    res.__dict__.update(lateness_stats(late))
    res.fires_per_s = fires_per_s([ns / 1e6 for ns in first.values()], t_ms, w.kind, w.n)
    res.lost = w.n - len(first)
    res.extra["dup"] = len(recs) - len(first)
    res.extra.update(cpu_cost(c0, c1, len(first)))
    _store_cost(res, w0, w1, len(first))
    if probe is None:
        return
    _etcd_cost(res, m0, m1, len(first), res.extra["etcd_bg_rev_per_s"], end_wall - m0["_wall"])
    if durable is not None and res.lost == 0:
        # from the last due instant until no execution is left in etcd
        res.durable_s = round(end_wall - last_ms / 1000.0, 2)
    else:
        res.extra["runs_left"] = probe.runs_count()


def _kib_per(before: dict[str, float], after: dict[str, float], name: str, n: int) -> float | None:
    """KiB of resident memory part ``name`` grew by per item (None if it is not running)."""
    if name not in before or name not in after or not n:
        return None
    return round((after[name] - before[name]) * 1024 / n, 3)


def _creation_cost(client: Client, cluster: Cluster, n: int = CHUNK) -> dict[str, float]:
    """etcd's counters per created job, from ``n`` jobs due in a year (never claimed); none
    on the embedded store (the jobs are created all the same: the node holds as many)."""
    m0, w0 = _metrics(cluster), _writes(cluster, client)
    far = (math.floor(time.time()) + 365 * 86400) * 1000.0
    _create(client, [_at(far + i * 1000) for i in range(n)], prefix="far")
    m1, w1 = _metrics(cluster), _writes(cluster, client)
    out = {f"w_{k}": (w1[k] - w0[k]) / n for k in w0}
    if m0:
        out.update({k: (m1[k] - m0[k]) / n for k in ("revision", "put", "delete", "txn")})
    return out


def _etcd_cost(
    res: Result,
    m0: dict[str, float],
    m1: dict[str, float],
    execs: int,
    bg_rev_per_s: float,
    seconds: float,
) -> None:
    if not execs:
        return
    revs = m1["revision"] - m0["revision"]
    res.etcd_txns_per_exec = round(revs / execs, 3)
    res.etcd_writes_per_exec = round(
        (m1["put"] - m0["put"] + m1["delete"] - m0["delete"]) / execs, 3
    )
    res.extra["etcd_mvcc_txn_total_per_exec"] = round((m1["txn"] - m0["txn"]) / execs, 3)
    res.extra["etcd_bg_revs_in_window"] = round(bg_rev_per_s * seconds, 0)


def _sustained(
    w: Workload,
    client: Client,
    cluster: Cluster,
    probe: EtcdProbe | None,
    res: Result,
    est: Estimates,
) -> None:
    took = _create(client, ["* * * * * *"] * w.n, w.jitter_ms, prefix=w.name)
    res.extra["create_per_s"] = round(w.n / took, 0)
    start_ms = (math.floor(time.time()) + 4) * 1000  # warm-up: a few seconds of firing first
    end_ms = start_ms + w.duration_s * 1000
    say(
        f"  schedd {w.name}: created {w.n} per-second jobs in {took:.1f}s; measuring "
        f"{w.duration_s}s from T+{start_ms / 1000 - time.time():.1f}s"
    )
    _sleep_until(start_ms / 1000.0)
    m0, w0 = _metrics(cluster), _writes(cluster, client)
    m0["_wall"] = time.time()
    c0 = cluster.cpu()
    _sleep_until(end_ms / 1000.0)
    m1, w1 = _metrics(cluster), _writes(cluster, client)
    c1 = cluster.cpu()
    log = StartLog(cluster.record)
    in_window = 0
    deadline = time.monotonic() + 15.0
    while time.monotonic() < deadline:  # the window's last fires may still be arriving
        log.poll()
        recs = [r for r in log.records() if start_ms <= _scheduled(r[0]) < end_ms]
        in_window = len({r[0] for r in recs})
        if in_window >= w.expected:
            break
        time.sleep(0.5)
    wait_t0 = time.time()
    durable = None
    if probe is not None:
        durable = _poll_zero(probe, lambda: probe.runs_scheduled_before(end_ms), 30.0)
    recs = [r for r in log.records() if start_ms <= _scheduled(r[0]) < end_ms]
    first: dict[str, tuple[int, int]] = {}
    for eid, ms, ns in recs:
        first.setdefault(eid, (ms, ns))
    late = [ns / 1e6 - ms for ms, ns in first.values()]
    res.__dict__.update(lateness_stats(late))
    res.fires_per_s = fires_per_s(
        [ns / 1e6 for _, ns in first.values()], start_ms, "sustained", w.n, w.duration_s
    )
    res.lost = w.expected - len(first)
    res.extra["dup"] = len(recs) - len(first)
    res.extra["expected"] = w.expected
    # The window's CPU over the executions that started in it, whatever their scheduled time
    # (in steady state what fires in a window is claimed in the one before and settled in the
    # one after; past saturation fewer start than are due).
    started = sum(1 for _e, _ms, ns in log.records() if c0["_epoch_ns"] <= ns < c1["_epoch_ns"])
    res.extra["started_in_window"] = started
    res.extra.update(cpu_cost(c0, c1, started))
    _store_cost(res, w0, w1, started)
    if probe is None:
        return
    _etcd_cost(res, m0, m1, w.expected, res.extra["etcd_bg_rev_per_s"], w.duration_s)
    if durable is not None and res.lost == 0:
        res.durable_s = round(wait_t0 + durable - end_ms / 1000.0, 2)

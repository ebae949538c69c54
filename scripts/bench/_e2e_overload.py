"""The e2e benchmark's overload workloads: capacity, then 1.5x and 3x of it, then half of it.

Each step runs on a fresh cluster (:class:`~_e2e_cluster.Cluster`). Every job is a per-second
job (1 s jitter, so each fires at its own millisecond) with ``misfire=catch_up`` and a limit far
above any backlog, so every fire must run, late if need be: a fire that never starts is lost.

1. **capacity** (``overload`` runs it first unless ``--capacity-rate`` gives it): ``probe`` jobs
   (20k; 10k with ``--quick``), far beyond what two cores carry, fire every second of a 40 s
   window (20 s quick); the probe's throughput is the starts per second over its second half.
   The jobs exist a few seconds before the window, so the node claims some of the first
   seconds ahead (that stock is what a herd created in advance gets); by the second half the
   stock is gone and the figure is what claiming, firing and settling sustain together under
   saturation (``saturated`` false: the probe offered too little). C is the highest sustained
   rate that held (p99 <= 100 ms, none lost) earlier in the same run, or that throughput
   without a sustained ladder (it claims far ahead and batches, so it overstates what holds
   on time); ``saturated_over_sustained`` < 1 says the cluster does less saturated than at
   the rate it holds.
2. **overload x k** (k = 1.5 and 3): C/2 *base* jobs fire every second for the whole run, and
   k*C - C/2 *surge* jobs fire every second of a 30 s window [T, T + 30 s), so the offered load
   is k*C during the window and C/2 after it. Measured:

   - ``throughput_during``: executions started per second during the window (target >= 0.9 C);
   - ``lost``: fires due up to the end of the observation that never started, ``dup`` the ones
     that started twice, ``missed`` MISSED records (there should be none under catch_up);
   - ``backlog_at_end``: fires due before the window's end that started after it, and
     ``drain_estimate_s`` = that backlog over the spare capacity after it (C - C/2);
   - ``recovery_s``: from the window's end until the lateness is back to normal for good: the
     first scheduled second after which every second's p99 lateness stays within 100 ms
     (the sustained target); target ``recovery_s <=
     drain_estimate_s + 5`` (5 s: the claim lead and the one-second buckets).

A window is given to surge jobs as a cron expression whose seconds field is a range inside one
minute (``S-E M H D Mon *``, UTC), so the window starts at a second <= 29 of some minute; the
benchmark waits for such a start when it must.
"""

from __future__ import annotations

import math
import time
from collections import defaultdict
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from _e2e_cluster import Children, Cluster, StartLog, cpu_cost
from _e2e_common import Result, Workload, lateness_stats, percentile, say

from schedd.client import Client, build_job

CHUNK = 2000
#: The worker's recorder writes a start to the file at most 2 s after it (``_e2e_handlers``).
RECORD_LAG_S = 2.5
#: Lateness is back to normal when a second's p99 is within this (the sustained target).
NORMAL_P99_MS = 100.0
CATCH_UP_LIMIT = 10_000  # the most a job may ask for


def _create(client: Client, prefix: str, n: int, schedule: str) -> float:
    """Creates ``n`` per-second catch-up jobs; returns the seconds it took."""
    t0 = time.monotonic()
    for start in range(0, n, CHUNK):
        jobs = [
            build_job(
                f"{prefix}-{start + i}",
                schedule=schedule,
                handler="noop",
                max_attempts=1,
                jitter="1000ms",
                misfire="catch_up",
                catch_up_limit=CATCH_UP_LIMIT,
            )
            for i in range(min(CHUNK, n - start))
        ]
        for outcome in client.create_jobs(jobs):
            if isinstance(outcome, Exception):
                raise RuntimeError(f"create failed: {outcome}") from outcome
    return time.monotonic() - t0


def window_start(earliest_s: float, length_s: int) -> int:
    """The first whole second >= ``earliest_s`` from which ``length_s`` seconds fit in a minute."""
    t = math.ceil(earliest_s)
    if t % 60 + length_s > 60:
        t = (t // 60 + 1) * 60
    return t


def window_cron(start_s: int, length_s: int) -> str:
    """A cron expression (seconds field first, UTC) firing each second of [start, start+length)."""
    d = datetime.fromtimestamp(start_s, UTC)
    return f"{d.second}-{d.second + length_s - 1} {d.minute} {d.hour} {d.day} {d.month} *"


def _sched_s(execution_id: str) -> int:
    return int(execution_id.rpartition("@")[2]) // 1000


def _first_starts(log: StartLog) -> tuple[dict[str, tuple[int, int]], int]:
    """Per execution id (due ms, first start ns), and how many starts were repeats."""
    first: dict[str, tuple[int, int]] = {}
    dup = 0
    for eid, due_ms, ns in log.records():
        if eid in first:
            dup += 1
            if ns < first[eid][1]:
                first[eid] = (due_ms, ns)
        else:
            first[eid] = (due_ms, ns)
    return first, dup


def _measure(
    cluster: Cluster, from_s: float, to_s: float
) -> tuple[dict[str, float], dict[str, float], StartLog, dict[str, tuple[int, int]], int]:
    """CPU readings at ``from_s`` and ``to_s`` (wall seconds), then, once the recorder has
    written them, the first starts so far and how many of them fell between the readings."""
    _sleep_until(from_s)
    c0 = cluster.cpu()
    _sleep_until(to_s)
    c1 = cluster.cpu()
    time.sleep(RECORD_LAG_S)
    log = StartLog(cluster.record)
    first, _ = _first_starts(log)
    return c0, c1, log, first, _started_between(first.values(), c0["_epoch_ns"], c1["_epoch_ns"])


def _started_between(starts: Iterable[tuple[int, int]], a_ns: int, b_ns: int) -> int:
    return sum(1 for _due, ns in starts if a_ns <= ns < b_ns)


def measure_capacity(
    w: Workload, root: Path, children: Children, capacity: int, prefetch: int
) -> Result:
    """Step 1: the executions per second the cluster starts when offered far more."""
    res = Result("schedd", w.name, w.n)
    cluster = Cluster(root, children, capacity, jitter_ms=1000, prefetch=prefetch)
    try:
        cluster.start()
        with Client(cluster.address, timeout_s=120) as client:
            est_create = w.n / 3000.0
            length = w.duration_s
            t = window_start(time.time() + est_create + 6, length)
            took = _create(client, "probe", w.n, window_cron(t, length))
            res.extra["create_per_s"] = round(w.n / took)
            say(f"  schedd {w.name}: {w.n} jobs offer {w.n}/s for {length}s from "
                f"T+{t - time.time():.1f}s")  # fmt: skip
            c0, c1, _log, first, started = _measure(cluster, t + length // 2, t + length)
            seconds = (c1["_epoch_ns"] - c0["_epoch_ns"]) / 1e9
            res.fires_per_s = round(started / seconds, 1)
            # Not saturated: the capacity is at least this (the probe offered too little).
            res.extra["saturated"] = res.fires_per_s < 0.95 * w.n
            res.extra.update(cpu_cost(c0, c1, started))
            res.__dict__.update(lateness_stats(ns / 1e6 - due for due, ns in first.values()))
    except Exception as exc:
        res.error = f"{type(exc).__name__}: {exc}"[:500]
        res.extra["node_log_tail"] = cluster.log_tail("node", 600)
    finally:
        cluster.stop()
    return res


def _sleep_until(wall_s: float) -> None:
    time.sleep(max(0.0, wall_s - time.time()))


def run_overload(
    w: Workload,
    cap_per_s: float,
    root: Path,
    children: Children,
    capacity: int,
    prefetch: int,
) -> Result:
    """Step 2: k*C offered for 30 s over a base of C/2, then the base alone until recovered."""
    factor, length = w.factor, w.duration_s
    base_n = max(1, round(cap_per_s / 2))
    surge_n = max(1, round(factor * cap_per_s) - base_n)
    res = Result("schedd", w.name, base_n + surge_n)
    res.extra.update(capacity_per_s=round(cap_per_s, 1), factor=factor, base_jobs=base_n,
                     surge_jobs=surge_n)  # fmt: skip
    cluster = Cluster(root, children, capacity, jitter_ms=1000, prefetch=prefetch)
    try:
        cluster.start()
        with Client(cluster.address, timeout_s=120) as client:
            t_create = time.time()
            took = _create(client, "base", base_n, "* * * * * *")
            first_base_s = math.ceil(t_create + took) + 2  # the base's first fully loaded second
            est = (surge_n / max(base_n / took, 500.0)) * 1.5
            t = window_start(time.time() + est + 8, length)
            took2 = _create(client, "surge", surge_n, window_cron(t, length))
            res.extra["create_per_s"] = round((base_n + surge_n) / (took + took2))
            if time.time() > t - 2:
                raise RuntimeError("creating the surge jobs overran the window's start")
            say(f"  schedd {w.name}: base {base_n}/s, surge +{surge_n}/s for {length}s from "
                f"T+{t - time.time():.1f}s")  # fmt: skip
            _observe(w, res, cluster, client, cap_per_s, base_n, t, first_base_s)
    except Exception as exc:
        res.error = f"{type(exc).__name__}: {exc}"[:500]
        res.extra["node_log_tail"] = cluster.log_tail("node", 600)
    finally:
        cluster.stop()
    return res


def _observe(
    w: Workload,
    res: Result,
    cluster: Cluster,
    client: Client,
    cap_per_s: float,
    base_n: int,
    t: int,
    first_base_s: int,
) -> None:
    length = w.duration_s
    end = t + length
    c0, c1, log, first, started = _measure(cluster, t, end)
    seconds = (c1["_epoch_ns"] - c0["_epoch_ns"]) / 1e9
    res.extra["throughput_during"] = round(started / seconds, 1)
    res.extra["throughput_over_capacity"] = round(started / seconds / cap_per_s, 3)
    res.extra.update({f"overload_{k}": v for k, v in cpu_cost(c0, c1, started).items()})
    spare = cap_per_s - base_n
    # Follow the base load until the backlog is gone and lateness has been normal for 10 s
    # (bounded by twice the drain time a backlog of all the surplus would take, plus a minute).
    surplus = max(0.0, res.n - cap_per_s) * length
    limit_s = 60 + 2 * (surplus / spare if spare > 0 else 60)
    recovered_at = None
    while time.time() < end + limit_s:
        time.sleep(2.0)
        first, _ = _first_starts(log)
        by_sec = _p99_by_second(first)
        recovered_at = _recovered_from(by_sec, end, NORMAL_P99_MS)
        if recovered_at is not None and time.time() > recovered_at + 11 + 2:
            break
    stop_s = math.floor(time.time()) - 3  # fires due up to here must have started
    time.sleep(1.0)
    first, dup = _first_starts(log)
    by_sec = _p99_by_second(first)
    recovered_at = _recovered_from(by_sec, end, NORMAL_P99_MS)
    # The backlog the window left: fires due before its end that started after it.
    end_ns = end * 1_000_000_000
    backlog = sum(1 for due, ns in first.values() if due < end * 1000 and ns >= end_ns)
    res.extra["backlog_at_end"] = backlog
    drain = round(backlog / spare, 1) if spare > 0 else None
    res.extra["drain_estimate_s"] = drain
    res.extra["recovery_s"] = None if recovered_at is None else recovered_at - end
    res.extra["recovered_within_drain"] = bool(
        recovered_at is not None and drain is not None and recovered_at - end <= drain + 5
    )
    expected = base_n * (stop_s - first_base_s) + (res.n - base_n) * length
    counted = sum(1 for eid in first if first_base_s <= _sched_s(eid) < stop_s)
    res.lost = expected - counted
    res.extra["expected"] = expected
    res.extra["dup"] = dup
    try:
        res.extra["missed"] = len(client.list_executions(states=["MISSED"], limit=100_000))
    except Exception as exc:  # the listing is not what is measured: say why it is missing
        res.extra["missed"] = None
        res.extra["missed_error"] = f"{type(exc).__name__}: {exc}"[:300]
    res.__dict__.update(
        lateness_stats(
            ns / 1e6 - due for eid, (due, ns) in first.items() if t <= _sched_s(eid) < stop_s
        )
    )
    res.fires_per_s = res.extra["throughput_during"]


def _p99_by_second(first: dict[str, tuple[int, int]]) -> dict[int, float]:
    """p99 lateness (ms) of the executions scheduled in each second."""
    buckets: dict[int, list[float]] = defaultdict(list)
    for eid, (due, ns) in first.items():
        buckets[_sched_s(eid)].append(ns / 1e6 - due)
    return {s: percentile(sorted(v), 99) for s, v in buckets.items()}


def _recovered_from(by_sec: dict[int, float], end: int, normal_ms: float) -> int | None:
    """The first second >= ``end`` from which every observed second (10 at least) is normal."""
    secs = sorted(s for s in by_sec if s >= end)
    if len(secs) < 3:
        return None
    good_from = None
    for s in secs[:-2]:  # the newest seconds are still arriving
        if by_sec[s] > normal_ms:
            good_from = None
        elif good_from is None:
            good_from = s
    if good_from is None or secs[-3] - good_from < 10:
        return None
    return good_from


def summarize(results: list[Result]) -> dict[str, Any]:
    """Targets of the overload workloads."""
    out: dict[str, Any] = {}
    for r in results:
        if r.system != "schedd" or not r.workload.startswith("overload") or r.error:
            continue
        if r.workload == "capacity":
            continue
        key = r.workload
        out[f"{key}_throughput_ge_90pct"] = (r.extra.get("throughput_over_capacity") or 0) >= 0.9
        out[f"{key}_none_lost"] = r.lost == 0 and not r.extra.get("missed")
        out[f"{key}_recovered_within_drain"] = r.extra.get("recovered_within_drain", False)
    return out

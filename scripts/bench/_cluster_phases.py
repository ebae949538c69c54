"""The cluster benchmark's measurements, each on the running cluster of :mod:`_cluster_procs`.

- :func:`sustained`: fires/s and lateness of the per-second jobs over a window, with etcd's
  counters and every process's CPU time read at both ends;
- :func:`kill_cycle`: SIGKILL a node, time the takeover of its partitions (owned again, window
  loaded, firing again) and the lateness of the fires it owned; start it again and time the
  join (owning its share, firing in each partition it took);
- :func:`verify`: every expected fire of every per-second job started exactly once.

Times come from one wall clock: the benchmark's ``time.time_ns()``, the workers' start stamps
and the nodes' log timestamps (all processes on this machine).
"""

from __future__ import annotations

import contextlib
import json
import math
import statistics
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from _cluster_procs import BenchCluster, Records, read_node_log, read_ownership, wait_for
from _e2e_cluster import cpu_seconds, rss_mib
from _e2e_common import percentile, say

from schedd.client import Client, build_job
from schedd.store import partition_of

LOAD_SCRIPT = Path(__file__).resolve().parent / "_cluster_load.py"
CREATE_CHUNK = 2000
#: A start this long after the SIGKILL cannot be the dead node's (its streams closed with it).
KILL_MARGIN_NS = 50_000_000
#: The nodes' ``hold_ms``: how long before its instant a worker may hold an execution.
HOLD_S = 2.0


@dataclass
class Run:
    """What the phases share: the cluster, the record files, the per-second jobs."""

    cluster: BenchCluster
    records: Records
    etcd_pid: int
    first_fire: dict[str, int] = field(default_factory=dict)  # job id -> first scheduled ms
    partition: dict[str, int] = field(default_factory=dict)  # job id -> partition
    stored: int = 0  # jobs in the store (per-second ones included)
    idle_node_cores: float = 0.0  # the nodes' CPU with nothing due

    def firing_partitions(self) -> set[int]:
        """Partitions holding at least one per-second job (with few jobs, some hold none)."""
        return {self.partition[job] for job in self.first_fire}

    def part(self, execution_id: str) -> int:
        job = execution_id.rpartition("@")[0]
        p = self.partition.get(job)
        if p is None:
            p = self.partition[job] = partition_of(job, self.cluster.partitions)
        return p


def etcd_counters(endpoint: str) -> dict[str, float]:
    """Write counters from etcd's ``/metrics`` on its client URL."""
    wanted = {
        "etcd_debugging_mvcc_current_revision": "revision",
        "etcd_mvcc_txn_total": "txn",
        "etcd_mvcc_put_total": "put",
        "etcd_mvcc_delete_total": "delete",
        "etcd_server_proposals_committed_total": "proposals",
    }
    with urllib.request.urlopen(f"http://{endpoint}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    out: dict[str, float] = {}
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if name in wanted:
            out[wanted[name]] = float(value)
    return out


def stats_ms(values: Iterable[float]) -> dict[str, float | None]:
    v = sorted(values)
    if not v:
        return {"p50": None, "p99": None, "max": None, "n": 0}
    return {
        "p50": round(percentile(v, 50), 1),
        "p99": round(percentile(v, 99), 1),
        "max": round(v[-1], 1),
        "n": len(v),
    }


def _load(args: list[str], timeout_s: float) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, str(LOAD_SCRIPT), *args],
        capture_output=True, text=True, timeout=timeout_s, check=False,
    )  # fmt: skip
    if out.returncode != 0:
        raise RuntimeError(f"{LOAD_SCRIPT.name} {args[0]} failed: {out.stderr[-1500:]}")
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def etcd_ceiling(endpoint: str, seconds: float) -> dict[str, Any]:
    return _load(["ceiling", "--etcd", endpoint, "--seconds", str(seconds)], 120 + seconds * 3)


def fill(run: Run, target: int, procs: int, idle_first: int) -> dict[str, Any]:
    """Idle jobs until the store holds ``target`` jobs; ``procs`` fillers in parallel."""
    want = target - run.stored
    if want <= 0:
        return {"created": 0, "seconds": 0.0}
    c = run.cluster
    per = math.ceil(want / procs)
    t0 = time.monotonic()
    children = []
    for i in range(procs):
        first, count = idle_first + i * per, min(per, want - i * per)
        if count <= 0:
            break
        args = ["fill", "--etcd", c.etcd_endpoint, "--partitions", str(c.partitions),
                "--first", str(first), "--count", str(count)]  # fmt: skip
        children.append(
            subprocess.Popen(
                [sys.executable, str(LOAD_SCRIPT), *args],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    failed = 0
    for child in children:
        out, err = child.communicate(timeout=3600)
        if child.returncode != 0:
            raise RuntimeError(f"fill failed: {err[-1500:]}")
        failed += int(json.loads(out.strip().splitlines()[-1])["failed"])
    took = time.monotonic() - t0
    if failed:
        raise RuntimeError(f"fill: {failed} jobs not created")
    run.stored = target
    return {"created": want, "seconds": round(took, 1), "jobs_per_s": round(want / took)}


def create_per_second(run: Run, client: Client, count: int, jitter_ms: int) -> float:
    """``count`` more jobs firing every second (catch-up misfires: every fire must run),
    through the API; returns the seconds it took."""
    t0 = time.monotonic()
    first = len(run.first_fire)
    for start in range(first, first + count, CREATE_CHUNK):
        jobs = [
            build_job(f"sec-{i}", schedule="* * * * * *", handler="noop", max_attempts=1,
                      jitter=f"{jitter_ms}ms", misfire="catch_up", catch_up_limit=1000)
            for i in range(start, min(first + count, start + CREATE_CHUNK))
        ]  # fmt: skip
        for job in client.create_jobs(jobs):
            if isinstance(job, Exception):
                raise RuntimeError(f"create failed: {job}") from job
            run.first_fire[job.id] = job.next_fire_ms
            run.partition[job.id] = job.partition
    run.stored += count
    return time.monotonic() - t0


def _pids(run: Run) -> dict[str, int]:
    c = run.cluster
    alive = {n: p.pid for n, p in {**c.nodes, **c.workers}.items() if p.poll() is None}
    return {**alive, "etcd": run.etcd_pid}


def idle_node_cores(run: Run, seconds: float) -> float:
    """The nodes' CPU (cores, summed) with nothing due: the fixed cost under the per-fire one."""
    pids = [p.pid for p in run.cluster.nodes.values() if p.poll() is None]
    cpu0 = sum(cpu_seconds(pid) for pid in pids)
    time.sleep(seconds)
    return (sum(cpu_seconds(pid) for pid in pids) - cpu0) / seconds


def sustained(run: Run, duration_s: int, rate: int, idle_cores: float) -> dict[str, Any]:
    """Fires of the per-second jobs scheduled inside a ``duration_s`` window, measured.

    ``idle_cores``: the nodes' CPU with nothing due (:func:`idle_node_cores`); the marginal
    CPU per fire is what the nodes spent above it.
    """
    c = run.cluster
    start_ms = (math.floor(time.time()) + 2) * 1000
    end_ms = start_ms + duration_s * 1000
    since = len(run.records.poll())  # every start of the window is recorded after this row
    time.sleep(max(0.0, start_ms / 1000 - time.time()))
    pids = _pids(run)
    cpu0 = {n: cpu_seconds(pid) for n, pid in pids.items()}
    m0 = etcd_counters(c.etcd_endpoint)
    time.sleep(max(0.0, end_ms / 1000 - time.time()))
    m1 = etcd_counters(c.etcd_endpoint)
    cpu1 = {n: cpu_seconds(pid) for n, pid in pids.items()}
    expected = rate * duration_s

    first: dict[str, tuple[int, int]] = {}
    cursor = since

    def window() -> dict[str, tuple[int, int]] | None:
        nonlocal cursor
        rows = run.records.poll()
        for eid, due, ns in rows[cursor:]:
            sched = int(eid.rpartition("@")[2])
            if start_ms <= sched < end_ms and (eid not in first or ns < first[eid][1]):
                first[eid] = (due, ns)
        cursor = len(rows)
        return first if len(first) >= expected or time.time() * 1000 > end_ms + 15_000 else None

    wait_for(window, 30, "the window's fires", every=0.5)
    fires = len(first)
    late = stats_ms(ns / 1e6 - due for due, ns in first.values())
    cpu = {n: cpu1[n] - cpu0[n] for n in pids}
    node_cpu = sum(v for n, v in cpu.items() if n in c.nodes)
    d = {k: m1[k] - m0[k] for k in m0}
    per = max(fires, 1)
    return {
        "rate": rate,
        "duration_s": duration_s,
        "stored_jobs": run.stored,
        "expected": expected,
        "fires": fires,
        "node_cpu_s": round(node_cpu, 3),
        "fires_per_s": round(fires / duration_s, 1),
        "late_p50_ms": late["p50"],
        "late_p99_ms": late["p99"],
        "late_max_ms": late["max"],
        "node_cpu_us_per_fire": round(node_cpu * 1e6 / per, 1),
        "node_cpu_us_per_fire_marginal": round((node_cpu - idle_cores * duration_s) * 1e6 / per, 1),
        "node_idle_cores": round(idle_cores, 3),
        "cpu_cores": {n: round(v / duration_s, 3) for n, v in cpu.items()},
        "etcd_write_txns_per_fire": round(d["revision"] / per, 4),
        "etcd_mvcc_txn_per_fire": round(d["txn"] / per, 4),
        "etcd_key_writes_per_fire": round((d["put"] + d["delete"]) / per, 3),
        "etcd_proposals_per_fire": round(d["proposals"] / per, 4),
        "etcd_write_txns_per_s": round(d["revision"] / duration_s, 1),
        "etcd_key_writes_per_s": round((d["put"] + d["delete"]) / duration_s, 1),
    }


class FirstStarts:
    """Per partition in ``parts``, the earliest start after that partition's instant.

    Reads the records from index ``since`` on, each row once however often it is polled; rows
    of the two workers arrive out of order, so a result is final only once every start before
    it has been flushed (the recorder writes within 2 s).
    """

    def __init__(self, run: Run, since: int, parts: set[int], after_ns: dict[int, int]) -> None:
        self.run, self.cursor, self.parts, self.after_ns = run, since, parts, after_ns
        self.first: dict[int, int] = {}

    def advance(self) -> dict[int, int]:
        rows = self.run.records.poll()
        first, parts, after = self.first, self.parts, self.after_ns
        for i in range(self.cursor, len(rows)):
            eid, _due, ns = rows[i]
            p = self.run.part(eid)
            if p in parts and ns > after[p] and (p not in first or ns < first[p]):
                first[p] = ns
        self.cursor = len(rows)
        return first


def _late_until(
    run: Run, since: int, parts: set[int], from_ms: int, until_ns: dict[int, int]
) -> list[float]:
    """Lateness of the fires of ``parts`` due from ``from_ms`` until each partition resumed."""
    out = []
    for eid, due, ns in run.records.rows[since:]:
        p = run.part(eid)
        if p in parts and from_ms <= due <= until_ns[p] // 1_000_000:
            out.append(ns / 1e6 - due)
    return out


def _wait_fired(
    run: Run, since: int, parts: set[int], after_ns: dict[int, int], timeout_s: float, what: str
) -> dict[int, int]:
    """Per partition, the start ns of its first fire after ``after_ns`` (waits for all)."""
    scan = FirstStarts(run, since, parts, after_ns)

    def probe() -> bool | None:
        run.cluster.check_alive()
        return True if set(scan.advance()) == parts else None

    wait_for(probe, timeout_s, what, every=0.1)
    time.sleep(2.0)  # the other worker's earlier starts, if any, are flushed by now
    return dict(scan.advance())


def kill_cycle(run: Run, victim: str) -> dict[str, Any]:
    """SIGKILL ``victim``, measure the takeover; start it again, measure the join."""
    c = run.cluster
    survivors = [n for n in c.alive() if n != victim]
    via = survivors[0]
    owners = c.wait_balanced(c.alive())  # a node that lost its lease meanwhile has rejoined
    orphans = {p for p, owner in owners.items() if owner == victim}
    firing = orphans & run.firing_partitions()  # the ones whose fires can be waited for
    if not firing:
        raise RuntimeError(f"no per-second job in {victim}'s partitions: raise --rate")
    rss = {n: rss_mib(c.nodes[n].pid) for n in c.alive()}
    since = len(run.records.poll())
    kill_ns = time.time_ns()
    c.kill(victim)
    owned_at = wait_for(
        lambda: time.time() if all(c.owners(via).get(p) in survivors for p in orphans) else None,
        c.session_ttl_s + 60,
        "the orphaned partitions to be owned again",
    )
    ttl = c.session_ttl_s
    resumed = _wait_fired(
        run, since, firing, dict.fromkeys(firing, kill_ns + KILL_MARGIN_NS), ttl + 60,
        "every orphaned partition to fire again",
    )  # fmt: skip
    late = stats_ms(_late_until(run, since, firing, kill_ns // 1_000_000, resumed))
    logs = [read_node_log(c.log_path(n), kill_ns / 1e9) for n in survivors]
    claimed = {p: at for log in logs for p, at in log.claimed.items() if p in orphans}
    loaded = {p: v for log in logs for p, v in log.loaded.items() if p in orphans}
    load_ms = [(loaded[p][0] - claimed[p]) * 1000 for p in orphans if p in loaded and p in claimed]
    out: dict[str, Any] = {
        "victim": victim,
        "stored_jobs": run.stored,
        "orphaned_partitions": len(orphans),
        "owned_again_s": round(owned_at - kill_ns / 1e9, 2),
        "claimed_s": round(max(claimed.values()) - kill_ns / 1e9, 2) if claimed else None,
        "window_load_ms": stats_ms(load_ms),
        "due_entries_loaded": sum(v[1] for v in loaded.values()),
        "failover_s": round((max(resumed.values()) - kill_ns) / 1e9, 2),
        "failover_first_s": round((min(resumed.values()) - kill_ns) / 1e9, 2),
        "orphan_fires_late_ms": late,
        "rss_mib_before": rss,
    }
    out["join"] = _join(run, victim, via)
    return out


def _join(run: Run, victim: str, via: str) -> dict[str, Any]:
    """Starts ``victim`` again: until it owns its share and each partition it took fired."""
    c = run.cluster
    time.sleep(1.0)
    share = c.partitions // (len(c.alive()) + 1)
    since = len(run.records.poll())
    join_ns = time.time_ns()
    c.start_node(victim)

    def owned() -> set[int] | None:
        mine = {p for p, owner in c.owners(via).items() if owner == victim}
        return mine if len(mine) >= share else None

    mine = wait_for(owned, 90, f"{victim} to own its share ({share})")
    own_at = time.time()
    deadline = time.monotonic() + 60
    log = read_node_log(c.log_path(victim), join_ns / 1e9)
    while not set(mine) <= set(log.claimed) and time.monotonic() < deadline:
        time.sleep(0.2)  # its log line may trail the ownership key by a moment
        log = read_node_log(c.log_path(victim), join_ns / 1e9)
    firing = mine & run.firing_partitions()
    if not firing:
        raise RuntimeError(f"no per-second job in the partitions {victim} took: raise --rate")
    after = {p: int(log.claimed.get(p, own_at) * 1e9) for p in firing}
    resumed = _wait_fired(run, since, firing, after, 60, f"{victim}'s partitions to fire")
    late = stats_ms(_late_until(run, since, firing, join_ns // 1_000_000, resumed))
    c.wait_balanced(sorted(c.nodes))
    c.wait_workers()
    time.sleep(2.0)  # settled: its RSS after loading only its windows
    return {
        "share": share,
        "startup_s": round(log.serving - join_ns / 1e9, 2) if log.serving else None,
        "owned_share_s": round(own_at - join_ns / 1e9, 2),
        "fired_all_s": round((max(resumed.values()) - join_ns) / 1e9, 2),
        "moved_fires_late_ms": late,
        "rss_mib_after": rss_mib(c.nodes[victim].pid),
    }


def verify(run: Run, end_ms: int, timeout_s: float = 60.0) -> dict[str, Any]:
    """Every per-second fire from each job's first to ``end_ms`` started exactly once.

    This counts handler starts, which is stricter than schedd's promise (one *effect*, see
    docs/guarantees.md): a fire whose first run had not had its result committed when its
    partition changed hands (a node killed, a session lost, a rebalance) is handed out again by
    the new owner with a new token, and a worker other than the first one runs it again (the
    ledger that would answer it is the first worker's). Such doubles, with a claim of the
    partition by another node between the two starts, are ``doubled_after_owner_change``;
    any other is ``doubled_unexplained``: a bug.
    """
    expected = {
        f"{job}@{t}" for job, first in run.first_fire.items() for t in range(first, end_ms, 1000)
    }

    counts: Counter[str] = Counter()
    cursor = 0
    missing = set(expected)

    def seen() -> bool | None:
        nonlocal cursor
        rows = run.records.poll()
        counts.update(eid for eid, _, _ in rows[cursor:])
        cursor = len(rows)
        missing.difference_update([e for e in missing if e in counts])
        return True if not missing else None

    with contextlib.suppress(RuntimeError):  # what is still missing then is counted as lost
        wait_for(seen, timeout_s, "every expected fire", every=1.0)
    time.sleep(2.0)  # a late duplicate has a moment to show
    seen()
    lost = sorted(e for e in expected if e not in counts)
    doubled = {e for e in expected if counts[e] > 1}
    starts: dict[str, list[int]] = {}
    for eid, _, ns in run.records.rows:
        if eid in doubled:
            starts.setdefault(eid, []).append(ns)
    c = run.cluster
    ownership = read_ownership([c.log_path(n) for n in c.nodes])
    changed, detail = [], []
    for eid in sorted(doubled):
        runs = sorted(starts[eid])
        first_s, last_s = runs[0] / 1e9, runs[-1] / 1e9
        p = run.part(eid)
        between = [
            f"{at - first_s:+.2f}s {what}"
            for at, what in ownership.get(p, [])
            if first_s - HOLD_S <= at <= last_s
        ]
        if any("claimed" in what for what in between):
            changed.append(eid)
        detail.append({"execution": eid, "partition": p, "starts_s": [
            round(ns / 1e9, 3) for ns in runs], "ownership_meanwhile": between})  # fmt: skip
    if lost or doubled:
        say(f"  verify: lost {lost[:5]} doubled {detail[:5]}")
    return {
        "expected_fires": len(expected),
        "lost": len(lost),
        "doubled": len(doubled),
        "doubled_after_owner_change": len(changed),
        "doubled_unexplained": len(doubled) - len(changed),
        "starts_recorded": sum(counts.values()),
        "doubled_detail": detail[:20],
        "lost_detail": lost[:20],
    }


def median(values: Iterable[float | None]) -> float | None:
    v = [x for x in values if x is not None]
    return round(statistics.median(v), 2) if v else None

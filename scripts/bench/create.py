"""Benchmark: creating many jobs, against etcd's own ceiling for the same writes, in one run.

    .venv/bin/python scripts/bench/create.py [--jobs 100000] [--quick]

A fresh etcd and one ``schedd node`` (16 partitions, no worker). Every job is ``@every 24h``
with a 12 h jitter, so none is due during the run and no claim competes with the creates. Three
ways to create ``--jobs`` jobs, each into the same store (distinct names), measured in jobs/s:

- **etcd ceiling**: the very transactions ``BatchCreateJobs`` sends (a job's nested item:
  create-compares, the job, its cursor and its due key; one ``notify/`` key per partition
  touched; 128 items a transaction), built *before* the clock starts and sent by 8 concurrent
  writers with the nodes' own etcd client. Nothing of schedd's Python runs in the timed part:
  this is what etcd and the client transport accept.
- **api**: :meth:`schedd.client.Client.create_jobs` as a user calls it (built jobs, its default
  chunks and calls in flight), through gRPC, validation and the store.
- **api, one call at a time**: the same in calls of 2,000 jobs, each waiting for the last
  (how the client sent them before it pipelined, and a floor).

The summary's ``api_over_ceiling`` is the API's rate over the ceiling's (target >= 0.5), the
JSON line last. CPU-µs per created job for the node and etcd are reported per way.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _e2e_cluster import SCHEDD, Children, cpu_seconds
from _e2e_common import say

from schedd.client import Client, build_job
from schedd.dev import EtcdProcess, free_port
from schedd.model import validate_new_job_parsed
from schedd.store import EtcdConfig, JobStore, Keys, connect_etcd
from schedd.store._job_create import first_state
from schedd.store._notify import notify_ops
from schedd.store._records import FIRE, DueEntry
from schedd.v1 import job_pb2

PARTITIONS = 16
ITEMS = 128
WRITERS = 8


def _spec(name: str) -> job_pb2.Job:
    return build_job(name, schedule="@every 24h", handler="noop", jitter="12h", max_attempts=1)


def _items(store: JobStore, prefix: str, n: int, now: int) -> list[tuple[list[object], int]]:
    """The create transactions for ``n`` jobs, as ``JobStore.create_jobs`` builds them, each
    with its count of job items (the notify keys follow them)."""
    template, schedule = validate_new_job_parsed(_spec(prefix), now_ms=now, id_factory=str)
    k, o = store.keys, store.ops
    txns: list[tuple[list[object], int]] = []
    for lo in range(0, n, ITEMS):
        nested: list[object] = []
        touched: dict[int, list[tuple[str, int, int]]] = {}
        for i in range(lo, min(lo + ITEMS, n)):
            job = job_pb2.Job()
            job.CopyFrom(template)
            job.id = f"{prefix}-{i:08d}"
            job.partition = store.partition(job.id)
            state = first_state(job, now - 1, schedule)
            entry = DueEntry(job.partition, state.due_ms, job.id, FIRE, state.next_fire_ms)
            nested.append(
                o.txn(
                    [o.cmp_create(k.job_key(job.id), 0)],
                    [o.put(k.job_key(job.id), job.SerializeToString()),
                     o.put(k.state_key(job.id), state.encode()),
                     o.put(k.due_key(job.partition, state.due_ms, job.id), entry.encode())],
                )
            )  # fmt: skip
            touched.setdefault(job.partition, []).append((job.id, state.due_ms, state.next_fire_ms))
        txns.append((nested + notify_ops(o, k, {}, touched), len(nested)))
    return txns


async def ceiling(endpoint: str, n: int) -> float:
    kv = await connect_etcd(EtcdConfig(endpoints=(endpoint,), timeout_s=120))
    try:
        store = JobStore(kv, Keys(b"/schedd/v1/"), PARTITIONS)
        txns = _items(store, "ceil", n, time.time_ns() // 1_000_000)
        queue = list(reversed(txns))

        async def writer() -> None:
            while queue:
                txn, items = queue.pop()
                resp = await kv.txn([], txn)
                if not all(resp.nested_outcomes()[:items]):
                    raise RuntimeError("a ceiling create failed its compare")

        t0 = time.monotonic()
        await asyncio.gather(*(writer() for _ in range(WRITERS)))
        return time.monotonic() - t0
    finally:
        await kv.close()


def api(address: str, prefix: str, n: int, chunk: int | None, in_flight: int | None) -> float:
    """Seconds ``Client.create_jobs`` takes for ``n`` jobs (its defaults where None)."""
    jobs = [_spec(f"{prefix}-{i}") for i in range(n)]
    kw: dict[str, int] = {}
    if chunk is not None:
        kw["chunk"] = chunk
    if in_flight is not None:
        kw["in_flight"] = in_flight
    with Client(address, timeout_s=300) as client:
        t0 = time.monotonic()
        out = client.create_jobs(jobs, **kw)
        took = time.monotonic() - t0
    failed = [o for o in out if isinstance(o, Exception)]
    if failed:
        raise RuntimeError(f"{len(failed)} creates failed, first: {failed[0]}")
    return took


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--jobs", type=int, default=100_000)
    ap.add_argument("--quick", action="store_true", help="10k jobs")
    ap.add_argument("--chunk", type=int, default=None, help="api: jobs per call (client default)")
    ap.add_argument("--in-flight", type=int, default=None, help="api: calls at once (default)")
    args = ap.parse_args()
    n = 10_000 if args.quick else args.jobs
    children = Children()
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="schedd-create-") as tmp:
        root = Path(tmp)
        etcd = EtcdProcess(root / "etcd", name="create-bench")
        children.etcds.append(etcd)
        etcd.start()
        address = f"127.0.0.1:{free_port()}"
        node = children.spawn(
            [*SCHEDD, "--log-level", "warning", "node", "--etcd", etcd.endpoint,
             "--listen", address, "--node-id", "create-bench", "--data-dir", str(root / "node"),
             "--partitions", str(PARTITIONS)],
            root / "node.log",
        )  # fmt: skip
        try:
            _wait_up(address)
            assert etcd.proc is not None
            pids = {"node": node.pid, "etcd": etcd.proc.pid}
            ways = (
                ("etcd_ceiling", lambda: asyncio.run(ceiling(etcd.endpoint, n))),
                ("api", lambda: api(address, "api", n, args.chunk, args.in_flight)),
                ("api_one_call_at_a_time", lambda: api(address, "seq", n, 2000, 1)),
            )
            for name, way in ways:
                c0 = {k: cpu_seconds(p) for k, p in pids.items()}
                took = way()
                c1 = {k: cpu_seconds(p) for k, p in pids.items()}
                row = {"jobs": n, "seconds": round(took, 2), "jobs_per_s": round(n / took)}
                for k in pids:
                    row[f"{k}_cpu_us_per_job"] = round((c1[k] - c0[k]) / n * 1e6, 1)
                results[name] = row
                say(f"{name:>24}: {row}")
        finally:
            children.stop_all()
    ratio = results["api"]["jobs_per_s"] / results["etcd_ceiling"]["jobs_per_s"]
    summary = {
        "bench": "create",
        "jobs": n,
        "results": results,
        "ratios": {"api_over_ceiling": round(ratio, 3)},
        "targets": {"api_ge_half_ceiling": ratio >= 0.5},
    }
    print(json.dumps(summary), flush=True)
    return 0


def _wait_up(address: str, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    with Client(address, timeout_s=2) as client:
        while time.monotonic() < deadline:
            try:
                st = client.cluster_status()
                if sum(1 for p in st.partitions if p.owner) == PARTITIONS:
                    return
            except Exception:
                pass
            time.sleep(0.2)
    raise RuntimeError("the node did not own its partitions in time")


if __name__ == "__main__":
    sys.exit(main())

"""Load for the cluster benchmark, run as child processes: store filling and etcd's ceiling.

    python _cluster_load.py fill --etcd HOST:PORT --partitions P --first I --count N
    python _cluster_load.py ceiling --etcd HOST:PORT --seconds S

Each prints one JSON line. They run in their own interpreters so the benchmark's process (which
follows the workers' record files and polls the nodes) is not slowed by them, and so several
fillers can use both cores.

**fill** writes idle jobs (``@every 24h`` with a 12 h jitter: never due during a run, their
due keys spread over half a day as a real store's are) through :class:`schedd.store.JobStore`,
the same transactions the client API's ``BatchCreateJobs`` sends (jobs/, state/, due/ and the
``notify/`` notice the owners watch), from jobs validated by the API's own
``validate_new_job_parsed``. It only skips gRPC and the per-job schedule parse: one job is
validated per chunk and copied with new ids, which gives the records a validation of each
would. Ids are ``idle-{i:08d}``, so a larger size continues where a smaller one stopped.

**ceiling** measures what etcd accepts from this client (``etcd3aio`` behind
:func:`schedd.store.connect_etcd`, the nodes' own path) with nothing else running: write
transactions per second, each one nested item of four key writes (a claim's shape), from 16
concurrent writers; and key writes per second in batches of 128 such items (a busy claim or
settle round), from 4 concurrent writers. Keys live under ``/bench-ceiling/`` and are deleted
afterwards.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from typing import Any

from schedd._errors import SchedError
from schedd.client import build_job
from schedd.model import validate_new_job_parsed
from schedd.store import KV, EtcdConfig, JobStore, Keys, connect_etcd, prefix_end
from schedd.v1 import job_pb2

FILL_CHUNK = 1024
CEILING_PREFIX = b"/bench-ceiling/"
#: A claim item's key writes: the run, the cursor, the next due key, the deleted due key (here
#: a put, so every item writes the same number of keys whatever existed before).
ITEM_KEYS = 4


def idle_id(i: int) -> str:
    return f"idle-{i:08d}"


async def fill(
    endpoint: str, prefix: str, partitions: int, first: int, count: int
) -> dict[str, Any]:
    kv = await connect_etcd(EtcdConfig(endpoints=(endpoint,), timeout_s=120))
    store = JobStore(kv, Keys(prefix.encode()), partitions)
    spec = build_job("idle", schedule="@every 24h", handler="noop", jitter="12h", max_attempts=1)
    sem = asyncio.Semaphore(8)
    failed = 0

    async def chunk(lo: int, hi: int) -> None:
        nonlocal failed
        async with sem:
            now = time.time_ns() // 1_000_000
            template, schedule = validate_new_job_parsed(spec, now_ms=now, id_factory=str)
            jobs = []
            for i in range(lo, hi):
                job = job_pb2.Job()
                job.CopyFrom(template)
                job.id = idle_id(i)
                jobs.append(job)
            out = await store.create_jobs(jobs, now, [schedule] * len(jobs))
            failed += sum(1 for r in out if isinstance(r, SchedError))

    t0 = time.monotonic()
    try:
        await asyncio.gather(
            *(
                chunk(lo, min(lo + FILL_CHUNK, first + count))
                for lo in range(first, first + count, FILL_CHUNK)
            )
        )
    finally:
        await kv.close()
    took = time.monotonic() - t0
    return {"created": count - failed, "failed": failed, "seconds": round(took, 2)}


async def _write_for(
    kv: KV, seconds: float, writers: int, items: int, tag: str
) -> tuple[int, float]:
    """Transactions of ``items`` nested items each, from ``writers`` tasks; (txns, seconds)."""
    o = kv.ops
    run = b"r" * 200  # about an execution record's size
    done = 0
    stop_at = time.monotonic() + seconds

    async def writer(w: int) -> None:
        nonlocal done
        n = 0
        while time.monotonic() < stop_at:
            nested = []
            for i in range(items):
                k = CEILING_PREFIX + f"{tag}/{w}/{n}/{i}/".encode()
                nested.append(
                    o.txn(
                        [],
                        [o.put(k + b"run", run), o.put(k + b"state", b"[1, 2, 3]"),
                         o.put(k + b"due", b"f1700000000000"), o.put(k + b"old", b"")],
                    )
                )  # fmt: skip
            await kv.txn([], nested)
            n += 1
            done += 1

    t0 = time.monotonic()
    await asyncio.gather(*(writer(w) for w in range(writers)))
    return done, time.monotonic() - t0


async def ceiling(endpoint: str, seconds: float) -> dict[str, Any]:
    kv = await connect_etcd(EtcdConfig(endpoints=(endpoint,), timeout_s=60))
    try:
        await _write_for(kv, 1.0, 4, 1, "warm")
        single, s1 = await _write_for(kv, seconds, 16, 1, "single")
        batched, s2 = await _write_for(kv, seconds, 4, 128, "batch")
        await kv.delete(CEILING_PREFIX, prefix_end(CEILING_PREFIX))
    finally:
        await kv.close()
    return {
        "single_item_txns_per_s": round(single / s1, 1),
        "single_item_key_writes_per_s": round(single * ITEM_KEYS / s1, 1),
        "batched_txns_per_s": round(batched / s2, 1),
        "batched_items_per_s": round(batched * 128 / s2, 1),
        "batched_key_writes_per_s": round(batched * 128 * ITEM_KEYS / s2, 1),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("what", choices=("fill", "ceiling"))
    ap.add_argument("--etcd", required=True)
    ap.add_argument("--prefix", default="/schedd/v1/")
    ap.add_argument("--partitions", type=int, default=48)
    ap.add_argument("--first", type=int, default=0)
    ap.add_argument("--count", type=int, default=0)
    ap.add_argument("--seconds", type=float, default=5.0)
    args = ap.parse_args()
    if args.what == "fill":
        out = asyncio.run(fill(args.etcd, args.prefix, args.partitions, args.first, args.count))
    else:
        out = asyncio.run(ceiling(args.etcd, args.seconds))
    print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Benchmark: what auth costs a client API call, against the same node without it, in one run.

    .venv/bin/python scripts/bench/api_auth.py [--calls 2000]

A fresh etcd and two ``schedd node`` processes on it (separate prefixes, 4 partitions, no
worker): one plain, one with ``--auth`` and an editor token of tenant ``acme``. Against each,
one client makes ``--calls`` sequential ``GetJob`` calls (a read: the token check and the
tenant check) and ``--calls / 4`` sequential ``PauseJob``/``ResumeJob`` calls (a write: the
token check and the tenant check; the job read that learns the tenant and the audit entry
written to etcd before the answer happen on both nodes, auth or not). Reported: p50 and p99
latency per kind, and the ratios auth / plain (the JSON line last).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _e2e_cluster import SCHEDD
from _e2e_common import say

from schedd.auth import TokenStore
from schedd.client import AsyncClient
from schedd.dev import EtcdProcess, free_port
from schedd.store import EtcdConfig, Keys, connect_etcd
from schedd.v1 import auth_pb2


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


async def _measure(client: AsyncClient, calls: int) -> dict[str, float]:
    job = (await client.create_job("bench", schedule="@every 24h", handler="noop")).job
    for _ in range(50):  # warm the channel and the node
        await client.get_job(job.id)
    reads: list[float] = []
    for _ in range(calls):
        t0 = time.perf_counter()
        await client.get_job(job.id)
        reads.append((time.perf_counter() - t0) * 1000)
    writes: list[float] = []
    for n in range(calls // 4):
        t0 = time.perf_counter()
        await (client.pause_job(job.id) if n % 2 == 0 else client.resume_job(job.id))
        writes.append((time.perf_counter() - t0) * 1000)
    return {
        "read_p50_ms": statistics.median(reads),
        "read_p99_ms": _pct(reads, 0.99),
        "write_p50_ms": statistics.median(writes),
        "write_p99_ms": _pct(writes, 0.99),
    }


async def _wait_up(client: AsyncClient) -> None:
    deadline = time.monotonic() + 30
    while True:
        try:
            st = await client.cluster_status()
            if st.partitions and all(p.owner for p in st.partitions):
                return
        except Exception:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError("node did not come up")
        await asyncio.sleep(0.2)


async def main_async(calls: int) -> dict[str, Any]:
    root = Path(tempfile.mkdtemp(prefix="schedd-bench-auth-"))
    etcd = EtcdProcess(root / "etcd", name="bench-auth").start()
    procs: list[subprocess.Popen[bytes]] = []
    results: dict[str, dict[str, float]] = {}
    try:
        for mode in ("plain", "auth"):
            prefix = f"/bench-{mode}/"
            address = f"127.0.0.1:{free_port()}"
            argv = [
                *SCHEDD, "node", "--etcd", etcd.endpoint, "--listen", address, "--node-id", mode,
                "--data-dir", str(root / mode), "--partitions", "4", "--prefix", prefix,
                *(["--auth"] if mode == "auth" else []),
            ]  # fmt: skip
            log = (root / f"{mode}.log").open("wb")
            procs.append(subprocess.Popen(argv, stdout=log, stderr=log))
            token = None
            if mode == "auth":
                kv = await connect_etcd(EtcdConfig(endpoints=(etcd.endpoint,)))
                store = TokenStore(kv, Keys(prefix.encode()))
                wanted = auth_pb2.ApiToken(role="editor", tenant="acme")
                _, token = await store.create(wanted, 0, int(time.time() * 1000), "bench")
                await kv.close()
            client = AsyncClient(address, timeout_s=10, token=token)
            try:
                await _wait_up(client)
                results[mode] = await _measure(client, calls)
            finally:
                await client.close()
            say(f"{mode}: {json.dumps({k: round(v, 3) for k, v in results[mode].items()})}")
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait(10)
        etcd.stop()
    plain, auth = results["plain"], results["auth"]
    return {
        "benchmark": "api_auth",
        "calls": calls,
        "plain": plain,
        "auth": auth,
        "read_p50_ratio": auth["read_p50_ms"] / plain["read_p50_ms"],
        "write_p50_ratio": auth["write_p50_ms"] / plain["write_p50_ms"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=2000)
    args = parser.parse_args()
    summary = asyncio.run(main_async(args.calls))
    print(json.dumps(summary, sort_keys=True))


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Benchmark the store backends on one workload: memory, rocksdb (and etcd when on PATH).

Usage: ``PYTHONPATH=src:scripts .venv/bin/python scripts/bench/store_kv.py [--scale 1.0]``

Each backend gets a fresh store and the same phases, timed on the wall clock:

* ``txn128``: transactions of 128 puts (fresh keys), one after another: the claim shape.
* ``txn128_x8``: the same from 8 concurrent writers: on rocksdb they share WAL syncs
  (group commit), on etcd they share raft rounds.
* ``put``: single puts, one after another: one sync (or raft round) each.
* ``put_x32``: single puts from 32 concurrent writers.
* ``range100``: range reads of 100 keys each, one after another.

Every write is acknowledged durable (rocksdb: fsync'd WAL; etcd: its default fsync). The
table goes to stderr with each backend's ops/s and its ratio to memory; rocksdb also shows
batches per WAL sync. The last stdout line is one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from schedd.dev import EtcdProcess
from schedd.store import KV, EtcdConfig, MemoryKV, connect_etcd
from schedd.store.rocksdb import RocksKV

VALUE = b"x" * 200  # about a stored execution


async def _txn128(kv: KV, n: int, writers: int, tag: str) -> int:
    ops = kv.ops

    async def one(w: int) -> None:
        for t in range(n // writers):
            base = f"{tag}/{w:02d}/{t:05d}/"
            await kv.txn([], [ops.put(f"{base}{i:03d}".encode(), VALUE) for i in range(128)])

    await asyncio.gather(*(one(w) for w in range(writers)))
    return (n // writers) * writers * 128


async def _puts(kv: KV, n: int, writers: int, tag: str) -> int:
    async def one(w: int) -> None:
        for i in range(n // writers):
            await kv.put(f"{tag}/{w:02d}/{i:06d}".encode(), VALUE)

    await asyncio.gather(*(one(w) for w in range(writers)))
    return (n // writers) * writers


async def _ranges(kv: KV, n: int, txns: int) -> int:
    """Reads the keys of the ``txns`` transactions of the txn128 phase, 100 at a time."""
    for i in range(n):
        start = f"txn128/00/{i % txns:05d}/".encode()
        kvs, _, _ = await kv.range(start, start + b"\xff", limit=100)
        assert len(kvs) == 100, len(kvs)
    return n * 100


async def _timed(what: Callable[[], Awaitable[int]]) -> float:
    started = time.perf_counter()
    ops = await what()
    return ops / (time.perf_counter() - started)


async def run_phases(kv: KV, scale: float) -> dict[str, float]:
    """ops/s per phase (puts or keys read per second)."""

    def n(base: int) -> int:
        return max(8, int(base * scale))

    return {
        "txn128": await _timed(lambda: _txn128(kv, n(80), 1, "txn128")),
        "txn128_x8": await _timed(lambda: _txn128(kv, n(160), 8, "txn128x8")),
        "put": await _timed(lambda: _puts(kv, n(1000), 1, "put")),
        "put_x32": await _timed(lambda: _puts(kv, n(4000), 32, "putx32")),
        "range100": await _timed(lambda: _ranges(kv, n(500), n(80))),
    }


async def bench(scale: float, root: Path) -> dict[str, Any]:
    results: dict[str, Any] = {}
    memory = MemoryKV()
    results["memory"] = await run_phases(memory, scale)
    await memory.close()

    rocks = await RocksKV.open(root / "rocks")
    results["rocksdb"] = await run_phases(rocks, scale)
    results["rocksdb_batches_per_sync"] = round(rocks.batches / max(rocks.syncs, 1), 2)
    await rocks.close()

    if shutil.which("etcd") is None:
        print("etcd not on PATH: skipped", file=sys.stderr)
        return results
    etcd = EtcdProcess(root / "etcd", name="store-kv-bench").start()
    try:
        client = await connect_etcd(EtcdConfig(endpoints=(etcd.endpoint,)))
        results["etcd"] = await run_phases(client, scale)
        await client.close()
    finally:
        etcd.stop()
    return results


def report(results: dict[str, Any]) -> None:
    backends = [b for b in ("memory", "rocksdb", "etcd") if b in results]
    print(f"{'phase':<12}" + "".join(f"{b:>22}" for b in backends), file=sys.stderr)
    for phase in results["memory"]:
        cells = []
        for b in backends:
            rate = results[b][phase]
            ratio = rate / results["memory"][phase]
            cells.append(f"{rate:>12,.0f}/s ({ratio:5.3f}x)")
        print(f"{phase:<12}" + "".join(f"{c:>22}" for c in cells), file=sys.stderr)
    print(f"rocksdb batches per WAL sync: {results['rocksdb_batches_per_sync']}", file=sys.stderr)
    if "etcd" in results:
        ratios = {p: results["rocksdb"][p] / results["etcd"][p] for p in results["etcd"]}
        results["rocksdb_over_etcd"] = {p: round(r, 2) for p, r in ratios.items()}
        print(f"rocksdb / etcd: {results['rocksdb_over_etcd']}", file=sys.stderr)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=float, default=1.0, help="multiply every phase's size")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="schedd-store-kv-") as tmp:
        results = asyncio.run(bench(args.scale, Path(tmp)))
    report(results)
    rounded = {
        k: {p: round(r) for p, r in v.items()}
        if isinstance(v, dict) and k != "rocksdb_over_etcd"
        else v
        for k, v in results.items()
    }
    print(json.dumps(rounded, sort_keys=True))


if __name__ == "__main__":
    main()

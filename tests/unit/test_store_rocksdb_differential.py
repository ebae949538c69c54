"""The rocksdb backend against the memory one: the same seeded random history, the same answers.

The contract suite pins each rule with a small example; this drives many transactions of
every shape (nested, delete ranges, leases, compaction) through both stores and compares
every read, including reads in the past and watch replays, so the log's undo and replay
paths meet shapes no example thought of.
"""

from __future__ import annotations

import asyncio
import random
from pathlib import Path
from typing import Any

import pytest

from schedd._clock import ManualClock
from schedd._errors import Unavailable
from schedd.store import KV, KeyValue, MemoryKV, TxnRejected, WatchEvent
from schedd.store.rocksdb import RocksKV

KEYS = [b"k%02d" % i for i in range(24)]
TO_END = b"\x00"


def _random_op(rng: random.Random, ops: Any, lease: int, depth: int = 0) -> Any:
    roll = rng.random()
    key = rng.choice(KEYS)
    if roll < 0.45:
        return ops.put(key, b"v%d" % rng.randrange(1000), lease if rng.random() < 0.2 else 0)
    if roll < 0.6:
        end = rng.choice([b"", rng.choice(KEYS), TO_END])
        return ops.delete(key, end if end in (b"", TO_END) or end > key else b"")
    if roll < 0.8 or depth:
        return ops.get(key, rng.choice([b"", TO_END, rng.choice(KEYS)]))
    inner = [_random_op(rng, ops, lease, depth + 1) for _ in range(rng.randrange(1, 3))]
    other = [_random_op(rng, ops, lease, depth + 1) for _ in range(rng.randrange(0, 2))]
    return ops.txn([_random_compare(rng, ops)], inner, other)


def _random_compare(rng: random.Random, ops: Any) -> Any:
    make = ops.cmp_create if rng.random() < 0.5 else ops.cmp_mod
    return make(rng.choice(KEYS), rng.choice([0, 0, rng.randrange(1, 40)]))


def _shape(kvs: list[KeyValue]) -> list[tuple[Any, ...]]:
    return [(kv.key, kv.value, kv.create_revision, kv.mod_revision, kv.version) for kv in kvs]


async def _txn(kv: KV, rng_state: object, lease: int) -> tuple[Any, ...]:
    """One random transaction (drawn from ``rng_state``) and what it answered."""
    rng = random.Random()
    rng.setstate(rng_state)  # type: ignore[arg-type]
    ops = kv.ops
    compares = [_random_compare(rng, ops) for _ in range(rng.randrange(0, 2))]
    success = [_random_op(rng, ops, lease) for _ in range(rng.randrange(1, 5))]
    failure = [_random_op(rng, ops, lease) for _ in range(rng.randrange(0, 2))]
    try:
        res = await kv.txn(compares, success, failure)
    except TxnRejected:
        return ("rejected",)
    except Unavailable as exc:  # a put with a lease that expired
        return ("unavailable", str(exc))
    # Both in-process backends share one result type: compare every response, nested too.
    return res.succeeded, res.revision, _tree(res._responses)  # type: ignore[attr-defined]


def _tree(responses: list[Any]) -> list[Any]:
    """Responses with KeyValues as tuples: None (put), int (delete), list (get), tuple (txn)."""
    out: list[Any] = []
    for r in responses:
        if isinstance(r, tuple):
            out.append((r[0], _tree(r[1])))
        elif isinstance(r, list):
            out.append(_shape(r))
        else:
            out.append(r)
    return out


async def _events(kv: KV, from_rev: int, upto: int) -> list[WatchEvent]:
    out: list[WatchEvent] = []
    if from_rev > upto:
        return out
    async with asyncio.timeout(5):
        async for batch in kv.watch(b"", TO_END, from_rev):
            out += batch.events
            if batch.revision >= upto:
                return out
    return out


@pytest.mark.parametrize("seed", range(8))
async def test_the_same_history_gives_the_same_answers(tmp_path: Path, seed: int) -> None:
    clock = ManualClock(0)
    memory = MemoryKV(clock=clock)
    rocks = await RocksKV.open(tmp_path, clock=clock)
    rng = random.Random(seed)
    leases = [await s.grant(3) for s in (memory, rocks)]
    compacted = 0
    try:
        for step in range(150):
            state = rng.getstate()
            rng.random()  # move on; both stores draw the same txn from ``state``
            answers = [
                await _txn(s, state, lease)
                for s, lease in zip((memory, rocks), leases, strict=True)
            ]
            assert answers[0] == answers[1], step
            clock.advance(rng.choice([0, 0, 0, 1]))
            if rng.random() < 0.05:
                leases = [await s.grant(3) for s in (memory, rocks)]
            current = memory.revision
            assert rocks.revision == current
            past = rng.randrange(max(compacted, 1), current + 1)
            limit = rng.choice([0, 1, 3])
            found = [
                await s.range(b"", TO_END, revision=past, limit=limit) for s in (memory, rocks)
            ]
            assert (_shape(found[0][0]), found[0][2]) == (_shape(found[1][0]), found[1][2]), step
            if rng.random() < 0.03:
                compacted = rng.randrange(compacted, current + 1)
                for s in (memory, rocks):
                    await s.compact(compacted)
        start = max(compacted, 1)
        replay = [await _events(s, start, memory.revision) for s in (memory, rocks)]
        assert replay[0] == replay[1]
    finally:
        await memory.close()
        await rocks.close()


async def test_concurrent_readers_see_only_synced_states(tmp_path: Path) -> None:
    rocks = await RocksKV.open(tmp_path)
    seen: list[tuple[int, list[tuple[Any, ...]]]] = []

    async def writer(n: int) -> None:
        rng = random.Random(n)
        for _ in range(40):
            await _txn(rocks, rng.getstate(), 0)
            rng.random()

    async def reader() -> None:
        for _ in range(60):
            kvs, rev, _ = await rocks.range(b"", TO_END)
            seen.append((rev, _shape(kvs)))
            await asyncio.sleep(0)

    try:
        await asyncio.gather(*(writer(n) for n in range(4)), reader(), reader())
        assert rocks.syncs < rocks.batches
        for rev, shape in seen:
            kvs, _, _ = await rocks.range(b"", TO_END, revision=rev)
            assert _shape(kvs) == shape  # what a reader saw is the state at its revision
            assert all(kv[3] <= rev for kv in shape)
    finally:
        await rocks.close()

"""The store contract, part 2: leases, watches and compaction, on every backend."""

from __future__ import annotations

import asyncio

import pytest

from contract.backends import Backend
from schedd._errors import Unavailable
from schedd.store import KV, RevisionCompacted, WatchCompacted, WatchEvent, prefix_end


async def _events(kv: KV, start: bytes, end: bytes, from_rev: int, n: int) -> list[WatchEvent]:
    """The first ``n`` events of a watch (5 s at most)."""
    out: list[WatchEvent] = []
    async with asyncio.timeout(5):
        async for batch in kv.watch(start, end, from_rev):
            assert batch.events and batch.revision >= batch.events[-1].kv.mod_revision
            out += batch.events
            if len(out) >= n:
                break
    return out


def _brief(events: list[WatchEvent]) -> list[tuple[str, bytes, bytes, int]]:
    return [(e.kind, e.kv.key, e.kv.value, e.kv.mod_revision) for e in events]


async def test_leased_keys_go_on_revoke_and_unknown_leases_are_refused(backend: Backend) -> None:
    b, ops = backend, backend.kv.ops
    lease = await b.kv.grant(5)
    assert lease > 0 and 0 < await b.kv.keepalive_once(lease) <= 5
    await b.kv.put(b.key("a"), b"1", lease=lease)
    await b.kv.txn([], [ops.put(b.key("b"), b"2", lease)])
    await b.kv.put(b.key("c"), b"3", lease=lease)
    await b.kv.put(b.key("c"), b"detached")  # lease 0 detaches it
    assert (await b.kv.get(b.key("a"))).lease == lease  # type: ignore[union-attr]
    before = await b.kv.put(b.key("plain"), b"x")
    await b.kv.revoke(lease)
    kvs, rev, _ = await b.kv.range(b.prefix, prefix_end(b.prefix))
    assert [kv.key for kv in kvs] == [b.key("c"), b.key("plain")]
    assert rev == before + 1  # both keys deleted in one revision
    assert await b.kv.keepalive_once(lease) <= 0
    await b.kv.revoke(lease)  # already gone: nothing to do
    with pytest.raises(Unavailable):
        await b.kv.txn([], [ops.put(b.key("d"), b"x"), ops.put(b.key("e"), b"y", lease)])
    assert await b.kv.get(b.key("d")) is None  # nothing of the txn applied


async def test_a_lease_expires_ttl_after_its_last_keepalive(backend: Backend) -> None:
    b = backend
    lease = await b.kv.grant(2)
    start = await b.kv.put(b.key("session"), b"alive", lease=lease) + 1
    await b.pass_time(1.3)
    assert await b.kv.keepalive_once(lease) > 0
    await b.pass_time(1.3)  # 2.6 s after the grant, 1.3 s after the keep-alive
    assert await b.kv.get(b.key("session")) is not None
    await b.pass_time(3.0 if b.name == "etcd" else 0.8)  # etcd checks expiry every 0.5 s
    assert await b.kv.get(b.key("session")) is None
    assert await b.kv.keepalive_once(lease) <= 0
    events = await _events(b.kv, b.prefix, prefix_end(b.prefix), start, 1)
    assert [(e.kind, e.kv.key, e.kv.value) for e in events] == [("delete", b.key("session"), b"")]


async def test_watch_from_a_past_revision_replays_puts_and_deletes(backend: Backend) -> None:
    b, end = backend, prefix_end(backend.prefix)
    r1 = await b.kv.put(b.key("a"), b"1")
    r2 = await b.kv.put(b.key("a"), b"2")
    await b.kv.put(b.key("outside") + b"\xff", b"x")  # inside the prefix, outside the range
    r4 = await b.kv.txn([], [b.kv.ops.delete(b.key("a")), b.kv.ops.put(b.key("b"), b"3")])
    events = await _events(b.kv, b.key("a"), b.key("c"), r1, 4)
    assert _brief(events) == [
        ("put", b.key("a"), b"1", r1),
        ("put", b.key("a"), b"2", r2),
        ("delete", b.key("a"), b"", r4.revision),
        ("put", b.key("b"), b"3", r4.revision),
    ]
    put = events[1].kv
    assert (put.create_revision, put.version) == (r1, 2)
    assert (events[2].kv.create_revision, events[2].kv.version) == (0, 0)
    later = await _events(b.kv, b.prefix, end, r4.revision, 2)
    assert {e.kv.key for e in later} == {b.key("a"), b.key("b")}


async def test_watch_delivers_live_changes_in_its_range_only(backend: Backend) -> None:
    b = backend
    start = await b.kv.put(b.key("x/seed"), b"") + 1
    task = asyncio.create_task(_events(b.kv, b.key("x/"), prefix_end(b.key("x/")), start, 3))
    await asyncio.sleep(0.05)
    await b.kv.put(b.key("y"), b"not watched")
    r1 = await b.kv.put(b.key("x/1"), b"one")
    r2 = await b.kv.put(b.key("x/2"), b"two")
    r3 = (await b.kv.txn([], [b.kv.ops.delete(b.key("x/1"))])).revision
    events = await task
    assert _brief(events) == [
        ("put", b.key("x/1"), b"one", r1),
        ("put", b.key("x/2"), b"two", r2),
        ("delete", b.key("x/1"), b"", r3),
    ]


async def test_compaction_forgets_history_before_its_revision(backend: Backend) -> None:
    b, end = backend, prefix_end(backend.prefix)
    r1 = await b.kv.put(b.key("a"), b"1")
    r2 = await b.kv.put(b.key("a"), b"2")
    r3 = await b.kv.put(b.key("b"), b"3")
    await b.kv.compact(r2)
    await b.kv.compact(r1)  # older than the last compaction: nothing to do
    with pytest.raises(RevisionCompacted):
        await b.kv.range(b.prefix, end, revision=r1)
    kvs, _, _ = await b.kv.range(b.prefix, end, revision=r2)  # the state at r2 stays
    assert [(kv.key, kv.value) for kv in kvs] == [(b.key("a"), b"2")]
    with pytest.raises(WatchCompacted) as caught:
        await _events(b.kv, b.prefix, end, r1, 1)
    assert caught.value.compact_revision >= r2
    events = await _events(b.kv, b.prefix, end, r2, 2)
    assert [(e.kv.value, e.kv.mod_revision) for e in events] == [(b"2", r2), (b"3", r3)]
    kvs, _ = await b.kv.range_all(b.prefix, end)
    assert [kv.value for kv in kvs] == [b"2", b"3"]

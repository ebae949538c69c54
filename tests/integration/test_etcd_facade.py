"""The etcd facade against a real etcd: ranges, fenced nested transactions, leases, watches."""

from __future__ import annotations

import asyncio

import pytest

from schedd._errors import Unavailable
from schedd.store import EtcdConfig, EtcdKV, WatchCompacted, prefix_end


async def test_nested_txn_gives_each_item_its_own_compare(etcd: EtcdKV, etcd_prefix: bytes) -> None:
    a, b = etcd_prefix + b"a", etcd_prefix + b"b"
    await etcd.put(a, b"exists")
    resp = await etcd.txn(
        [],
        [
            etcd.ops.txn([etcd.ops.cmp_create(a, 0)], [etcd.ops.put(a, b"new")]),
            etcd.ops.txn([etcd.ops.cmp_create(b, 0)], [etcd.ops.put(b, b"new")]),
        ],
    )
    assert resp.succeeded
    outcomes = resp.nested_outcomes()
    assert outcomes == [False, True]
    kv_a, kv_b = await etcd.get(a), await etcd.get(b)
    assert kv_a is not None and kv_a.value == b"exists"
    assert kv_b is not None and kv_b.value == b"new"
    assert kv_b.mod_revision == resp.revision


async def test_range_all_pages_at_one_revision(etcd: EtcdKV, etcd_prefix: bytes) -> None:
    for i in range(25):
        await etcd.put(etcd_prefix + f"k{i:03d}".encode(), b"v")
    kvs, rev = await etcd.range_all(etcd_prefix, prefix_end(etcd_prefix), page=7)
    assert [kv.key for kv in kvs] == [etcd_prefix + f"k{i:03d}".encode() for i in range(25)]
    assert rev >= kvs[-1].mod_revision
    keys, _ = await etcd.range_all(etcd_prefix, prefix_end(etcd_prefix), page=7, keys_only=True)
    assert [kv.key for kv in keys] == [kv.key for kv in kvs]
    assert all(kv.value == b"" for kv in keys) and all(kv.value == b"v" for kv in kvs)


async def test_lease_expiry_removes_attached_key(etcd: EtcdKV, etcd_prefix: bytes) -> None:
    lease = await etcd.grant(2)
    assert await etcd.keepalive_once(lease) > 0
    await etcd.put(etcd_prefix + b"owned", b"x", lease=lease)
    await etcd.revoke(lease)
    assert await etcd.get(etcd_prefix + b"owned") is None


async def test_watch_sees_changes_and_reports_compaction(etcd: EtcdKV, etcd_prefix: bytes) -> None:
    key = etcd_prefix + b"w"
    rev = await etcd.put(key, b"1")
    await etcd.put(key, b"2")
    seen: list[bytes] = []
    async for batch in etcd.watch(etcd_prefix, prefix_end(etcd_prefix), rev):
        seen.extend(ev.kv.value for ev in batch.events)
        if len(seen) >= 2:
            break
    assert seen == [b"1", b"2"]
    last = await etcd.put(key, b"3")
    await etcd.compact(last)
    with pytest.raises(WatchCompacted):
        async with asyncio.timeout(5):
            async for _ in etcd.watch(etcd_prefix, prefix_end(etcd_prefix), rev):
                pass


async def test_unreachable_etcd_is_unavailable() -> None:
    from schedd.dev import free_port

    client = await EtcdKV.connect(
        EtcdConfig(endpoints=(f"127.0.0.1:{free_port()}",), timeout_s=0.5)
    )
    try:
        with pytest.raises(Unavailable):
            await client.get(b"/x")
    finally:
        await client.close()


def test_endpoint_parsing() -> None:
    assert EtcdConfig.parse_endpoints("a:1, b:2") == ("a:1", "b:2")
    with pytest.raises(ValueError, match="HOST:PORT"):
        EtcdConfig.parse_endpoints("nohost")

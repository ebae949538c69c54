"""The store contract, part 1: revisions, versions, reads and transactions, on every backend."""

from __future__ import annotations

import pytest

from contract.backends import Backend
from schedd.store import TxnRejected, prefix_end


async def _revision(b: Backend) -> int:
    _, rev, _ = await b.kv.range(b.prefix, prefix_end(b.prefix), limit=1)
    return rev


async def test_one_revision_per_write_txn_none_for_no_write(backend: Backend) -> None:
    b, ops = backend, backend.kv.ops
    r1 = await b.kv.put(b.key("a"), b"1")
    assert await _revision(b) == r1
    res = await b.kv.txn([], [ops.put(b.key("x"), b"1"), ops.put(b.key("y"), b"2")])
    assert res.succeeded and res.revision == r1 + 1
    x, y = await b.kv.get_many([b.key("x"), b.key("y")])
    assert x is not None and y is not None
    assert x.mod_revision == y.mod_revision == r1 + 1
    # reads only, a failed compare without failure ops, a delete of nothing: no new revision
    read = await b.kv.txn([], [ops.get(b.key("a"))])
    assert read.revision == r1 + 1
    failed = await b.kv.txn([ops.cmp_mod(b.key("a"), 12345)], [ops.put(b.key("a"), b"no")])
    assert not failed.succeeded and failed.revision == r1 + 1
    assert await b.kv.delete(b.key("absent")) == 0
    assert await _revision(b) == r1 + 1
    assert (await b.kv.get(b.key("a"))).value == b"1"  # type: ignore[union-attr]


async def test_create_revision_mod_revision_and_version(backend: Backend) -> None:
    b, key = backend, backend.key("k")
    r1 = await b.kv.put(key, b"1")
    r2 = await b.kv.put(key, b"2")
    kv = await b.kv.get(key)
    assert kv is not None
    assert (kv.create_revision, kv.mod_revision, kv.version, kv.lease) == (r1, r2, 2, 0)
    assert await b.kv.delete(key) == 1
    assert await b.kv.get(key) is None
    r4 = await b.kv.put(key, b"3")
    kv = await b.kv.get(key)
    assert kv is not None
    assert (kv.create_revision, kv.mod_revision, kv.version) == (r4, r4, 1)  # version restarts
    assert r1 < r2 < r4


async def test_range_order_limit_more_keys_only(backend: Backend) -> None:
    b = backend
    for name in ["c", "a", "e", "b", "d"]:
        await b.kv.put(b.key(name), name.encode() * 2)
    end = prefix_end(b.prefix)
    kvs, rev, more = await b.kv.range(b.prefix, end)
    assert [kv.key for kv in kvs] == [b.key(n) for n in "abcde"] and not more
    assert rev == max(kv.mod_revision for kv in kvs)
    kvs, _, more = await b.kv.range(b.prefix, end, limit=2)
    assert [kv.value for kv in kvs] == [b"aa", b"bb"] and more
    kvs, _, more = await b.kv.range(b.prefix, end, limit=5)
    assert len(kvs) == 5 and not more
    kvs, _, _ = await b.kv.range(b.key("b"), b.key("d"), keys_only=True)
    assert [kv.key for kv in kvs] == [b.key("b"), b.key("c")]
    assert all(kv.value == b"" and kv.version == 1 for kv in kvs)


async def test_range_at_a_past_revision(backend: Backend) -> None:
    b = backend
    r1 = await b.kv.put(b.key("a"), b"old")
    await b.kv.put(b.key("a"), b"new")
    await b.kv.put(b.key("b"), b"later")
    await b.kv.delete(b.key("a"))
    kvs, rev, _ = await b.kv.range(b.prefix, prefix_end(b.prefix), revision=r1)
    assert [(kv.key, kv.value, kv.mod_revision) for kv in kvs] == [(b.key("a"), b"old", r1)]
    assert rev == r1 + 3  # the header is the current revision
    kvs, _ = await b.kv.range_all(b.prefix, prefix_end(b.prefix), revision=r1 + 2, page=1)
    assert [kv.value for kv in kvs] == [b"new", b"later"]


async def test_range_all_pages_at_one_revision(backend: Backend) -> None:
    b = backend
    names = [f"k{i:03d}" for i in range(23)]
    for n in names:
        await b.kv.put(b.key(n), b"v")
    kvs, rev = await b.kv.range_all(b.prefix, prefix_end(b.prefix), page=5)
    assert [kv.key for kv in kvs] == [b.key(n) for n in names]
    assert rev == kvs[-1].mod_revision
    keys, _ = await b.kv.range_all(b.prefix, prefix_end(b.prefix), page=4, keys_only=True)
    assert [kv.key for kv in keys] == [kv.key for kv in kvs]
    assert all(kv.value == b"" for kv in keys)


async def test_get_many_and_count(backend: Backend) -> None:
    b = backend
    for n in ["a", "b", "c"]:
        await b.kv.put(b.key(n), n.encode())
    found = await b.kv.get_many([b.key("c"), b.key("zz"), b.key("a")], per_txn=2)
    assert [kv.value if kv else None for kv in found] == [b"c", None, b"a"]
    assert await b.kv.count(b.prefix, prefix_end(b.prefix)) == 3
    assert await b.kv.count(b.key("b"), prefix_end(b.prefix)) == 2
    assert await b.kv.get_many([]) == []


async def test_compares_on_create_and_mod_revision_with_0_for_absent(backend: Backend) -> None:
    b, ops, key = backend, backend.kv.ops, backend.key("k")
    absent = await b.kv.txn([ops.cmp_create(key, 0), ops.cmp_mod(key, 0)], [ops.put(key, b"first")])
    assert absent.succeeded
    kv = await b.kv.get(key)
    assert kv is not None
    held = await b.kv.txn(
        [ops.cmp_create(key, kv.create_revision), ops.cmp_mod(key, kv.mod_revision)],
        [ops.put(key, b"second")],
    )
    assert held.succeeded
    stale = await b.kv.txn(
        [ops.cmp_mod(key, kv.mod_revision)], [ops.put(key, b"third")], [ops.get(key)]
    )
    assert not stale.succeeded and len(stale) == 1
    assert [v.value for v in stale.kvs(0)] == [b"second"]
    assert not (await b.kv.txn([ops.cmp_create(key, 0)], [ops.delete(key)])).succeeded
    assert (await b.kv.get(key)).value == b"second"  # type: ignore[union-attr]


async def test_nested_txns_choose_branches_on_the_state_before_any_op(backend: Backend) -> None:
    b, ops = backend, backend.kv.ops
    a, c, d = b.key("a"), b.key("c"), b.key("d")
    await b.kv.put(c, b"exists")
    res = await b.kv.txn(
        [],
        [
            ops.put(a, b"outer"),
            # a is absent before the txn: this compare holds although the op above wrote a
            ops.txn([ops.cmp_create(a, 0)], [ops.put(d, b"saw a absent")], [ops.get(a)]),
            ops.txn([ops.cmp_create(c, 0)], [ops.put(c, b"no")], [ops.get(c), ops.get(a)]),
            ops.get(a),
        ],
    )
    assert res.succeeded and len(res) == 4
    assert res.nested_outcomes() == [False, True, False, False]
    assert res.txn_succeeded(1) and not res.txn_succeeded(2)
    failed = res.nested(2)
    assert not failed.succeeded and failed.revision == res.revision
    assert [kv.value for kv in failed.kvs(0)] == [b"exists"]
    # ops run in order: reads see the writes made before them in the same txn
    assert [kv.value for kv in failed.kvs(1)] == [b"outer"]
    assert [kv.value for kv in res.kvs(3)] == [b"outer"]
    assert (await b.kv.get(d)).value == b"saw a absent"  # type: ignore[union-attr]
    assert (await b.kv.get(d)).mod_revision == res.revision  # type: ignore[union-attr]


async def test_failure_branch_runs_when_outer_compares_fail(backend: Backend) -> None:
    b, ops = backend, backend.kv.ops
    owner, x = b.key("owner"), b.key("x")
    res = await b.kv.txn(
        [ops.cmp_create(owner, 999_999_999)],
        [ops.put(x, b"fenced write")],
        [ops.put(b.key("why"), b"fenced out"), ops.txn([], [ops.get(x)])],
    )
    assert not res.succeeded and res.txn_succeeded(1)
    assert await b.kv.get(x) is None
    assert (await b.kv.get(b.key("why"))).mod_revision == res.revision  # type: ignore[union-attr]


@pytest.mark.parametrize(
    "shape",
    ["put twice", "put in two nested txns", "delete range covers a put", "nested put deleted"],
)
async def test_a_key_written_twice_in_one_txn_is_rejected(backend: Backend, shape: str) -> None:
    b, ops = backend, backend.kv.ops
    a, z = b.key("a"), b.key("z")
    before = await b.kv.put(z, b"untouched")
    success = {
        "put twice": [ops.put(a, b"1"), ops.put(a, b"2")],
        "put in two nested txns": [
            ops.txn([], [ops.put(a, b"1")]),
            ops.txn([], [ops.put(a, b"2")]),
        ],
        "delete range covers a put": [ops.put(a, b"1"), ops.delete(b.prefix, prefix_end(b.prefix))],
        "nested put deleted": [ops.delete(a), ops.txn([], [ops.put(a, b"1")])],
    }[shape]
    with pytest.raises(TxnRejected):
        await b.kv.txn([], [ops.put(b.key("other"), b"x"), *success])
    assert await _revision(b) == before  # nothing applied
    assert await b.kv.get(b.key("other")) is None


async def test_same_key_in_both_branches_of_one_nested_txn_is_fine(backend: Backend) -> None:
    b, ops, a = backend, backend.kv.ops, backend.key("a")
    res = await b.kv.txn(
        [], [ops.txn([ops.cmp_create(a, 0)], [ops.put(a, b"1")], [ops.put(a, b"2")])]
    )
    assert res.txn_succeeded(0)
    res = await b.kv.txn(
        [], [ops.txn([ops.cmp_create(a, 0)], [ops.put(a, b"1")], [ops.put(a, b"2")])]
    )
    assert not res.txn_succeeded(0)
    assert (await b.kv.get(a)).version == 2  # type: ignore[union-attr]


async def test_delete_range_deletes_every_key_in_it_at_one_revision(backend: Backend) -> None:
    b, ops = backend, backend.kv.ops
    for n in "abcd":
        await b.kv.put(b.key(n), b"v")
    res = await b.kv.txn(
        [], [ops.delete(b.key("b"), b.key("d")), ops.get(b.prefix, prefix_end(b.prefix))]
    )
    assert [kv.key for kv in res.kvs(1)] == [b.key("a"), b.key("d")]
    assert await _revision(b) == res.revision
    assert await b.kv.delete(b.prefix, prefix_end(b.prefix)) == 2
    assert await b.kv.count(b.prefix, prefix_end(b.prefix)) == 0

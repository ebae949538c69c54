"""The hand-written etcd wire encoders produce exactly what protobuf serializes."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from schedd.store.etcd._wire import (
    EtcdOps,
    cmp_create,
    cmp_mod,
    op_delete,
    op_get,
    op_put,
    op_txn,
    request,
    rpc_pb2,
    w_cmp_create,
    w_cmp_mod,
    w_delete,
    w_get,
    w_put,
    w_txn,
)

keys = st.binary(min_size=1, max_size=300)
values = st.binary(max_size=70_000)
revisions = st.integers(min_value=0, max_value=2**63 - 1)


def _compare_field(c: object) -> bytes:
    return bytes(rpc_pb2.TxnRequest(compare=[c]).SerializeToString())


def _success_field(op: object) -> bytes:
    return bytes(rpc_pb2.TxnRequest(success=[op]).SerializeToString())


@given(keys, revisions)
def test_compares_match_protobuf(key: bytes, rev: int) -> None:
    assert w_cmp_create(key, rev) == _compare_field(cmp_create(key, rev))
    assert w_cmp_mod(key, rev) == _compare_field(cmp_mod(key, rev))


@given(keys, values, st.integers(min_value=0, max_value=2**62))
def test_put_matches_protobuf(key: bytes, value: bytes, lease: int) -> None:
    assert w_put(key, value, lease) == _success_field(op_put(key, value, lease))


@given(keys, st.binary(max_size=300))
def test_delete_and_get_match_protobuf(key: bytes, end: bytes) -> None:
    assert w_delete(key, end) == _success_field(op_delete(key, end))
    assert w_get(key, end) == _success_field(op_get(key, end))


@given(
    st.lists(st.tuples(keys, revisions), max_size=5),
    st.lists(st.tuples(keys, values), max_size=5),
    st.lists(keys, max_size=3),
)
def test_nested_txn_matches_protobuf(
    cmps: list[tuple[bytes, int]], puts: list[tuple[bytes, bytes]], dels: list[bytes]
) -> None:
    wire = w_txn(
        [w_cmp_mod(k, r) for k, r in cmps],
        [w_put(k, v) for k, v in puts] + [w_delete(k) for k in dels],
    )
    pb = op_txn(
        [cmp_mod(k, r) for k, r in cmps],
        [op_put(k, v) for k, v in puts] + [op_delete(k) for k in dels],
    )
    assert wire == _success_field(pb)
    # And a whole request parses back to the same message.
    fence = w_cmp_create(b"owner", 7)
    parsed = rpc_pb2.TxnRequest.FromString(fence + wire + wire)
    assert parsed == rpc_pb2.TxnRequest(compare=[cmp_create(b"owner", 7)], success=[pb, pb])


@given(
    st.lists(st.tuples(keys, revisions), max_size=3),
    st.lists(st.tuples(keys, values), max_size=3),
    st.lists(keys, max_size=3),
)
def test_failure_branches_match_protobuf(
    cmps: list[tuple[bytes, int]], puts: list[tuple[bytes, bytes]], gets: list[bytes]
) -> None:
    ops = EtcdOps()
    success = [w_put(k, v) for k, v in puts]
    failure = [w_get(k) for k in gets]
    wire = ops.txn([w_cmp_mod(k, r) for k, r in cmps], success, failure)
    pb = op_txn(
        [cmp_mod(k, r) for k, r in cmps],
        [op_put(k, v) for k, v in puts],
        [op_get(k) for k in gets],
    )
    assert wire == _success_field(pb)
    whole = request([w_cmp_create(b"owner", 7)], success, failure)
    assert rpc_pb2.TxnRequest.FromString(whole) == rpc_pb2.TxnRequest(
        compare=[cmp_create(b"owner", 7)],
        success=[op_put(k, v) for k, v in puts],
        failure=[op_get(k) for k in gets],
    )

"""etcd's ``TxnRequest`` fields as wire bytes: the etcd backend's ops (pure functions).

Each ``w_*`` returns one field of a ``TxnRequest``, serialized exactly as protobuf would
(tests compare them byte for byte with the protobuf builders below): ``w_cmp_*`` a
``compare`` entry, the others a ``success`` entry. A request is the concatenation of its
fields, compares first; a nested transaction (:func:`w_txn`) is a success entry holding such
a concatenation. A success entry becomes a ``failure`` entry by swapping its one-byte tag
(:func:`as_failure`). Fields are written in field number order and zeros are left out,
except inside the Compare ``target_union`` oneof.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from etcd3aio._protobuf import rpc_pb2  # type: ignore[attr-defined]

_LEN1 = [bytes((n,)) for n in range(128)]
#: Tags of the TxnRequest fields: compare (1), success (2), failure (3), all length-delimited.
_SUCCESS_TAG = 0x12
_FAILURE_TAG = b"\x1a"


def _varint(n: int) -> bytes:
    if n < 0x80:
        return _LEN1[n]
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _field(tag: bytes, body: bytes) -> bytes:
    """A length-delimited field: tag, length, body."""
    n = len(body)
    return tag + (_LEN1[n] if n < 0x80 else _varint(n)) + body


def w_cmp_create(key: bytes, create_revision: int) -> bytes:
    """Wire form of :func:`cmp_create`, as a ``TxnRequest.compare`` entry."""
    # target=CREATE (2: 1), key (3), create_revision (5, in the oneof: written even when 0)
    return _field(b"\x0a", _field(b"\x10\x01\x1a", key) + b"\x28" + _varint(create_revision))


def w_cmp_mod(key: bytes, mod_revision: int) -> bytes:
    """Wire form of :func:`cmp_mod`, as a ``TxnRequest.compare`` entry."""
    # target=MOD (2: 2), key (3), mod_revision (6, in the oneof: written even when 0)
    return _field(b"\x0a", _field(b"\x10\x02\x1a", key) + b"\x30" + _varint(mod_revision))


def w_put(key: bytes, value: bytes, lease: int = 0) -> bytes:
    """Wire form of :func:`op_put`, as a ``TxnRequest.success`` entry."""
    put = _field(b"\x0a", key)
    if value:
        put += _field(b"\x12", value)
    if lease:
        put += b"\x18" + _varint(lease)
    return _field(b"\x12", _field(b"\x12", put))  # success (2) <- RequestOp.request_put (2)


def w_delete(key: bytes, end: bytes = b"") -> bytes:
    """Wire form of :func:`op_delete`, as a ``TxnRequest.success`` entry."""
    body = _field(b"\x0a", key)
    if end:
        body += _field(b"\x12", end)
    return _field(b"\x12", _field(b"\x1a", body))  # <- RequestOp.request_delete_range (3)


def w_get(key: bytes, end: bytes = b"") -> bytes:
    """Wire form of :func:`op_get`, as a ``TxnRequest.success`` entry."""
    body = _field(b"\x0a", key)
    if end:
        body += _field(b"\x12", end)
    return _field(b"\x12", _field(b"\x0a", body))  # <- RequestOp.request_range (1)


def w_txn(compares: Sequence[Any], success: Sequence[Any], failure: Sequence[Any] = ()) -> bytes:
    """Wire form of :func:`op_txn`, as a ``TxnRequest.success`` entry.

    Typed ``Any`` to be the contract's ``OpBuilder.txn`` as is: the items are ``w_*`` bytes.
    """
    body = b"".join(compares) + b"".join(success)
    if failure:
        body += as_failure(failure)
    return _field(b"\x12", _field(b"\x22", body))  # <- RequestOp.request_txn (4)


def as_failure(ops: Sequence[Any]) -> bytes:
    """Success entries re-tagged as ``TxnRequest.failure`` entries, joined."""
    for op in ops:
        if op[0] != _SUCCESS_TAG:
            raise ValueError("not an op made by the etcd op builder")
    return b"".join([_FAILURE_TAG + op[1:] for op in ops])


def request(compares: Sequence[Any], success: Sequence[Any], failure: Sequence[Any]) -> bytes:
    """A whole serialized ``TxnRequest``."""
    body = b"".join(compares) + b"".join(success)
    return body + as_failure(failure) if failure else body


class EtcdOps:
    """The etcd backend's :class:`~schedd.store.abc.OpBuilder`: the ``w_*`` functions.

    Static methods, so ``ops.put`` is the plain function (no bound-method cost per item).
    """

    cmp_create = staticmethod(w_cmp_create)
    cmp_mod = staticmethod(w_cmp_mod)
    put = staticmethod(w_put)
    delete = staticmethod(w_delete)
    get = staticmethod(w_get)
    txn = staticmethod(w_txn)


# -- the protobuf builders the wire forms reproduce (the reference in tests) --------------------

Compare = rpc_pb2.Compare
RequestOp = rpc_pb2.RequestOp


def cmp_create(key: bytes, create_revision: int) -> Any:
    """True when the key's create revision equals this (0: the key does not exist)."""
    return Compare(
        result=Compare.EQUAL, target=Compare.CREATE, key=key, create_revision=create_revision
    )


def cmp_mod(key: bytes, mod_revision: int) -> Any:
    """True when the key was last written at this revision (0: the key does not exist)."""
    return Compare(result=Compare.EQUAL, target=Compare.MOD, key=key, mod_revision=mod_revision)


def op_put(key: bytes, value: bytes, lease: int = 0) -> Any:
    return RequestOp(request_put=rpc_pb2.PutRequest(key=key, value=value, lease=lease))


def op_delete(key: bytes, end: bytes = b"") -> Any:
    return RequestOp(request_delete_range=rpc_pb2.DeleteRangeRequest(key=key, range_end=end))


def op_get(key: bytes, end: bytes = b"") -> Any:
    return RequestOp(request_range=rpc_pb2.RangeRequest(key=key, range_end=end))


def op_txn(compare: Sequence[Any], success: Sequence[Any], failure: Sequence[Any] = ()) -> Any:
    """A nested transaction: lets one batch carry a separate compare per item."""
    return RequestOp(
        request_txn=rpc_pb2.TxnRequest(
            compare=list(compare), success=list(success), failure=list(failure)
        )
    )

"""Ops, txn results and range rules of the in-process backends (memory and rocksdb).

Both evaluate transactions in Python, so they share one op format (small tuples), one result
type and etcd's duplicate-key rule (:func:`check_branch`); only etcd has its own (wire bytes).
"""

from __future__ import annotations

from collections.abc import Callable, Container, Iterable, Sequence
from typing import Any, Protocol

from sortedcontainers import SortedDict

from schedd._errors import Unavailable
from schedd.store._types import KeyValue
from schedd.store.abc import Compare, KeyValueView, Op, TxnRejected

#: A range end meaning "to the last key" (etcd's convention).
TO_END = b"\x00"


class TupleOps:
    """The in-process backends' :class:`~schedd.store.abc.OpBuilder`: small tuples."""

    @staticmethod
    def cmp_create(key: bytes, create_revision: int) -> Compare:
        return ("create", key, create_revision)

    @staticmethod
    def cmp_mod(key: bytes, mod_revision: int) -> Compare:
        return ("mod", key, mod_revision)

    @staticmethod
    def put(key: bytes, value: bytes, lease: int = 0) -> Op:
        return ("put", key, value, lease)

    @staticmethod
    def delete(key: bytes, end: bytes = b"") -> Op:
        return ("delete", key, end)

    @staticmethod
    def get(key: bytes, end: bytes = b"") -> Op:
        return ("get", key, end)

    @staticmethod
    def txn(compares: Sequence[Compare], success: Sequence[Op], failure: Sequence[Op] = ()) -> Op:
        return ("txn", tuple(compares), tuple(success), tuple(failure))


class TupleTxnResult:
    """The in-process backends' :class:`~schedd.store.abc.TxnResult`."""

    __slots__ = ("_responses", "revision", "succeeded")

    def __init__(self, succeeded: bool, revision: int, responses: list[Any]) -> None:
        self.succeeded = succeeded
        self.revision = revision
        self._responses = responses

    def __len__(self) -> int:
        return len(self._responses)

    def kvs(self, index: int) -> Sequence[KeyValueView]:
        found: list[KeyValue] = self._responses[index]
        return found

    def txn_succeeded(self, index: int) -> bool:
        return bool(self._responses[index][0])

    def nested_outcomes(self) -> list[bool]:
        return [bool(r[0]) if isinstance(r, tuple) else False for r in self._responses]

    def nested(self, index: int) -> TupleTxnResult:
        ok, responses = self._responses[index]
        return TupleTxnResult(ok, self.revision, responses)


def in_range(key: bytes, start: bytes, end: bytes) -> bool:
    if not end:
        return key == start
    return start <= key and (end == TO_END or key < end)


def keys_in(mapping: SortedDict, start: bytes, end: bytes) -> Iterable[bytes]:
    if not end:
        return [start] if start in mapping else []
    found: Iterable[bytes]
    if end == TO_END:
        found = mapping.irange(minimum=start)
    else:
        found = mapping.irange(minimum=start, maximum=end, inclusive=(True, False))
    return found


def check_branch(ops: Sequence[Any]) -> tuple[set[bytes], list[tuple[bytes, bytes]]]:
    """etcd's rule: no key put twice, nor put and deleted, in one branch (nested included).

    Returns the keys put and the ranges deleted (for the enclosing level's check).

    Raises:
        TxnRejected: a key is written twice.
    """
    dels = [(op[1], op[2]) for op in ops if op[0] == "delete"]
    puts: set[bytes] = set()

    def add(key: bytes, shared: set[bytes] | None = None) -> None:
        twice = key in puts and (shared is None or key not in shared)
        if twice or (dels and any(in_range(key, start, end) for start, end in dels)):
            raise TxnRejected(f"duplicate key given in txn request: {key!r}")
        puts.add(key)

    for op in ops:
        if op[0] == "txn":
            then_puts, then_dels = check_branch(op[2])
            else_puts, else_dels = check_branch(op[3])
            for key in then_puts:
                add(key)
            for key in else_puts:
                add(key, shared=then_puts)  # then and else exclude each other
            dels += then_dels + else_dels
    for op in ops:
        if op[0] == "put":
            add(op[1])
    return puts, dels


def check_request(ops: Sequence[Any]) -> None:
    """:func:`check_branch` for one branch of a request, cheaply when no key comes near
    another: all puts and deletes of every nested branch are gathered flat, and only when
    two of them touch one key does the exact rule (which lets then/else share keys) run.

    Raises:
        TxnRejected: a key is written twice.
    """
    puts: list[bytes] = []
    dels: list[tuple[bytes, bytes]] = []
    _gather(ops, puts, dels)
    put_keys = set(puts)
    clash = len(put_keys) != len(puts) or any(
        (start in put_keys) if not end else any(in_range(k, start, end) for k in put_keys)
        for start, end in dels
    )
    if clash:
        check_branch(ops)


def _gather(ops: Sequence[Any], puts: list[bytes], dels: list[tuple[bytes, bytes]]) -> None:
    for op in ops:
        kind = op[0]
        if kind == "put":
            puts.append(op[1])
        elif kind == "delete":
            dels.append((op[1], op[2]))
        elif kind == "txn":
            _gather(op[2], puts, dels)
            _gather(op[3], puts, dels)


def compare_holds(compare: Any, kv: KeyValueView | None) -> bool:
    """Whether ``compare`` holds for its key, ``kv`` as it stands (None: absent)."""
    target, _, expected = compare
    if kv is None:
        return bool(expected == 0)
    actual = kv.create_revision if target == "create" else kv.mod_revision
    return bool(actual == expected)


def plan(
    compares: Sequence[Any],
    success: Sequence[Any],
    failure: Sequence[Any],
    holds: Callable[[Any], bool],
) -> tuple[bool, list[Any]]:
    """Chooses every branch of the tree against the state before any op runs.

    Returns whether the outer compares held and the chosen ops, each nested txn replaced by
    ``("txn", its outcome, its chosen steps)``. ``holds`` evaluates one compare.
    """
    ok = all(holds(c) for c in compares)
    steps: list[Any] = []
    for op in success if ok else failure:
        steps.append(("txn", *plan(op[1], op[2], op[3], holds)) if op[0] == "txn" else op)
    return ok, steps


def check_leases(steps: Sequence[Any], known: Container[int]) -> None:
    """Refuses a plan that puts with a lease not in ``known`` (etcd's "lease not found").

    Raises:
        Unavailable: a put names an unknown lease; nothing may be applied.
    """
    for step in steps:
        if step[0] == "txn":
            check_leases(step[2], known)
        elif step[0] == "put" and step[3] and step[3] not in known:
            raise Unavailable(f"etcdserver: requested lease not found ({step[3]:x})")


class StepWriter(Protocol):
    """What a backend's one-revision writer offers :func:`run_steps`: each op sees the
    writes of the ops before it."""

    def put(self, key: bytes, value: bytes, lease: int) -> None: ...

    def delete(self, start: bytes, end: bytes) -> int: ...

    def range(self, start: bytes, end: bytes) -> Sequence[KeyValueView]: ...


def run_steps(steps: Sequence[Any], writer: StepWriter) -> list[Any]:
    """Runs a planned branch (see :func:`plan`) through ``writer``; its responses, in the
    shape :class:`TupleTxnResult` reads (nested txns as ``(outcome, responses)``)."""
    out: list[Any] = []
    for step in steps:
        kind = step[0]
        if kind == "put":
            writer.put(step[1], step[2], step[3])
            out.append(None)
        elif kind == "delete":
            out.append(writer.delete(step[1], step[2]))
        elif kind == "get":
            out.append(writer.range(step[1], step[2]))
        else:
            out.append((step[1], run_steps(step[2], writer)))
    return out

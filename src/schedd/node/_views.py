"""Merging the nodes' parts of a cluster-wide view: pure functions, no I/O.

A node's run history, its in-memory dispatch state and the workers connected to it are its
own; ``run list``, ``run get``, ``worker list`` and ``cluster status`` ask every live node for
its part (:mod:`schedd.node._fanout`) and merge the parts here, so any node gives the same
answer.

Executions are deduplicated by id (one per job and scheduled time) keeping the most advanced
copy (:func:`advancement`), and listed in :func:`~schedd.history.list_order`. Pages are keyset
pages: the token names the last execution returned, and every node answers with what comes
after it, so a page is right however the parts shifted between two calls.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Iterable, Sequence

from schedd._errors import InvalidArgument
from schedd.history import Position, list_order
from schedd.v1 import execution_pb2, scheduler_pb2

_TOKEN_TAG = b"r1:"

_TERMINAL = frozenset(
    {
        execution_pb2.EXECUTION_SUCCEEDED,
        execution_pb2.EXECUTION_FAILED,
        execution_pb2.EXECUTION_DEAD,
        execution_pb2.EXECUTION_MISSED,
        execution_pb2.EXECUTION_SKIPPED,
        execution_pb2.EXECUTION_CANCELLED,
    }
)
_PROGRESS = {
    execution_pb2.EXECUTION_DISPATCHED: 1,
    execution_pb2.EXECUTION_RUNNING: 2,
}


def encode_page_token(last: Position) -> str:
    """The token of the page after ``last`` (URL-safe text)."""
    raw = _TOKEN_TAG + b"%d:%s" % (last.scheduled_ms, last.execution_id.encode())
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_page_token(token: str) -> Position | None:
    """The position a token names; None for the empty token (the first page).

    Raises:
        InvalidArgument: on ``page_token`` when it is not a token this API made.
    """
    if not token:
        return None
    bad = InvalidArgument("page_token", "not a page token from a previous ListExecutions answer")
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        if not raw.startswith(_TOKEN_TAG):
            raise bad
        sched, sep, eid = raw[len(_TOKEN_TAG) :].decode().partition(":")
        if not sep or not eid or not sched.isdigit():
            raise bad
        return Position(int(sched), eid)
    except (binascii.Error, ValueError, UnicodeDecodeError) as exc:
        raise bad from exc


def advancement(ex: execution_pb2.Execution) -> tuple[int, int, bool, int, int, bool]:
    """How far an execution got; of two copies of one execution, the larger is kept.

    A later attempt wins (a redriven dead letter is alive again), then a newer hand-out (the
    fencing token strictly increases), then a final state over a live one (the result of the
    same hand-out), then running over dispatched over waiting (the owner's memory is ahead
    of etcd, which is written only when the token changes). Of equals, the owner's copy
    that says why it waits wins.
    """
    return (
        ex.attempt,
        ex.fencing_token,
        ex.state in _TERMINAL,
        _PROGRESS.get(ex.state, 0),
        ex.finished_ms,
        bool(ex.waiting),
    )


def merge_executions(
    parts: Iterable[Iterable[execution_pb2.Execution]],
) -> list[execution_pb2.Execution]:
    """Every execution of the parts once (its most advanced copy), in list order."""
    best: dict[str, execution_pb2.Execution] = {}
    for part in parts:
        for ex in part:
            kept = best.get(ex.id)
            if kept is None or advancement(ex) > advancement(kept):
                best[ex.id] = ex
    return sorted(best.values(), key=list_order)


def cut_page(
    merged: list[execution_pb2.Execution], size: int, more: bool
) -> tuple[list[execution_pb2.Execution], str]:
    """The first ``size`` of ``merged`` and the next page's token.

    ``more``: some part was cut at ``size`` itself (it may hold further executions), so a
    full page has a successor even when the merge holds exactly ``size``.
    """
    page = merged[:size]
    if page and (len(merged) > size or (more and len(page) == size)):
        return page, encode_page_token(Position.of(page[-1]))
    return page, ""


def matches(ex: execution_pb2.Execution, job_id: str, tenant: str, states: Sequence[int]) -> bool:
    """Whether ``ex`` passes a ListExecutions request's filters."""
    return (
        (not job_id or ex.job_id == job_id)
        and (not tenant or ex.tenant == tenant)
        and (not states or ex.state in states)
    )


def merge_workers(
    reports: Iterable[Iterable[scheduler_pb2.WorkerStatus]],
) -> list[scheduler_pb2.WorkerStatus]:
    """One entry per worker id, with every node it has a stream to.

    ``in_flight`` and ``held`` add up over its streams; ``capacity`` and ``prefetch`` are its
    own (the largest reported); ``connected_ms`` is its oldest stream's.
    """
    merged: dict[str, scheduler_pb2.WorkerStatus] = {}
    nodes: dict[str, set[str]] = {}
    for report in reports:
        for w in report:
            ids = nodes.setdefault(w.worker_id, set())
            ids.update(w.node_ids or [w.node_id])
            out = merged.get(w.worker_id)
            if out is None:
                out = merged[w.worker_id] = scheduler_pb2.WorkerStatus()
                out.CopyFrom(w)
                continue
            out.in_flight += w.in_flight
            out.held += w.held
            out.capacity = max(out.capacity, w.capacity)
            out.prefetch = max(out.prefetch, w.prefetch)
            if w.connected_ms and (not out.connected_ms or w.connected_ms < out.connected_ms):
                out.connected_ms = w.connected_ms
            for field in ("queues", "handlers"):
                have = getattr(out, field)
                have.extend(q for q in getattr(w, field) if q not in have)
    for worker_id, out in merged.items():
        connected = sorted(i for i in nodes[worker_id] if i)
        del out.node_ids[:]
        out.node_ids.extend(connected)
        out.node_id = connected[0] if connected else ""
    return [merged[w] for w in sorted(merged)]


def missing_node(node_id: str, address: str, reason: str) -> scheduler_pb2.MissingNode:
    return scheduler_pb2.MissingNode(node_id=node_id, address=address, reason=reason)

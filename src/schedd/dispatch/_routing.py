"""Handing pending dispatches to the workers with credits: who gets what, in which order.

Pure selection over the dispatcher's pending dispatches and sessions: the dispatcher checks
it may dispatch at all, and ``send`` sends and tracks each one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from schedd.dispatch._pending import PendingDispatches, Route, accepts
from schedd.dispatch._session import WorkerSession, least_loaded
from schedd.v1 import worker_pb2

Send = Callable[[WorkerSession, worker_pb2.Dispatch], None]


def hand_out(pending: PendingDispatches, sessions: Iterable[WorkerSession], send: Send) -> None:
    """One pass: pending dispatches go to open, answering streams with credits.

    Routes take turns, one dispatch each per round; within a route tenants take turns (the
    pending queue's order) and the least loaded eligible stream goes first. A stream whose
    token is limited to some tenants takes only theirs. ``send(session, d)`` must use one of
    the session's credits. Every stream sent to is flushed at the end of the pass.
    """
    open_ = [s for s in sessions if not s.closed and not s.silent and s.credits > 0]
    if not open_ or not len(pending):
        return
    active = [(r, [s for s in open_ if accepts(s.hello, r)]) for r in pending.routes()]
    active = [(r, el) for r, el in active if el]
    if len(active) == 1 and len(active[0][1]) == 1:
        # One route, one worker that may take it (a burst to one pool): no turns to take.
        _to_one(pending, active[0][0], active[0][1][0], send)
        return
    used: set[WorkerSession] = set()
    while active:
        still: list[tuple[Route, list[WorkerSession]]] = []
        for route, eligible in active:
            session = least_loaded(eligible)
            if session is None:
                continue
            d = pending.pop(route, session.tenants)
            if d is None:
                if session.tenants is not None:  # none of its tenants': the others may
                    rest = [s for s in eligible if s is not session]
                    if rest:
                        still.append((route, rest))
                continue
            send(session, d)
            used.add(session)
            still.append((route, eligible))
        active = still
    # A pass ends a batch of fires (a wheel bucket, a resubmission): send it now rather
    # than after the flush interval, which only paces acks and cancels.
    for session in used:
        session.flush()


def _to_one(pending: PendingDispatches, route: Route, session: WorkerSession, send: Send) -> None:
    pop = pending.pop
    tenants = session.tenants
    while session.credits > 0:
        d = pop(route, tenants)
        if d is None:
            break
        send(session, d)
    session.flush()

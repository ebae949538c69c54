"""Choosing the workers that hold executions ahead of their instant, and noticing silent ones.

Pure selection over the dispatcher's sessions: the dispatcher sends, tracks and reports.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from schedd.dispatch._config import InFlight
from schedd.dispatch._pending import accepts, route_of
from schedd.dispatch._session import WorkerSession
from schedd.v1 import worker_pb2

log = logging.getLogger("schedd.dispatch._dispatcher")


def place_holds(
    sessions: Iterable[WorkerSession],
    dispatches: Sequence[worker_pb2.Dispatch],
    send: Callable[[WorkerSession, worker_pb2.Dispatch], None],
) -> list[worker_pb2.Dispatch]:
    """Each dispatch to the least loaded open, heard-from stream that may take its route and
    has a prefetch credit left, in order: ``send(session, d)`` is called before the next one
    is placed (it takes the credit, which the next choice must see). Returns the dispatches
    no stream could hold."""
    holders = [
        s
        for s in sessions
        if not s.closed and not s.silent and s.hold_credits > 0 and s.hello.prefetch > 0
    ]
    if not holders:
        return list(dispatches)
    by_route: dict[Any, list[WorkerSession]] = {}
    rejected: list[worker_pb2.Dispatch] = []
    for d in dispatches:
        route = route_of(d)
        candidates = by_route.get(route)
        if candidates is None:
            candidates = by_route[route] = [s for s in holders if accepts(s.hello, route)]
        session: WorkerSession | None = None
        for c in candidates:
            if c.tenants is not None and d.tenant not in c.tenants:
                continue
            if c.hold_credits > 0 and (session is None or c.load() < session.load()):
                session = c
        if session is None:
            rejected.append(d)
            continue
        send(session, d)
    return rejected


def silent_holds(
    sessions: Iterable[WorkerSession],
    in_flight: Mapping[str, InFlight],
    now: int,
    silent_after_ms: int,
) -> list[tuple[WorkerSession, InFlight]]:
    """Marks streams silent past ``silent_after_ms``; returns what silent ones hold unstarted
    once the last promise to them lapsed (they could start it until then). What they run is
    not returned: it stays theirs until its lease runs out (they may be slow, not gone)."""
    out: list[tuple[WorkerSession, InFlight]] = []
    for s in sessions:
        if s.closed:
            continue
        if not s.silent and now - s.last_heard_ms > silent_after_ms:
            s.silent = True
            log.warning(
                "worker %s sent nothing for %d ms: no more work for it; what it holds "
                "unstarted goes to other workers",
                s.worker_id, now - s.last_heard_ms, extra={"worker": s.worker_id},
            )  # fmt: skip
        if s.silent and now > s.promised_ms:
            for eid in list(s.in_flight):
                flight = in_flight.get(eid)
                if flight is not None and flight.dispatch.start_at_ms and not flight.started:
                    out.append((s, flight))
    return out

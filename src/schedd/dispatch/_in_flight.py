"""What is out on workers: each in-flight execution, the stream it went down, its lease.

The dispatcher's one table of dispatched executions. An execution is in flight from the
moment it is sent (or a probe finds a worker already running it) until its result arrives,
its lease runs out, its stream ends or it is forgotten. Each entry's lease deadline only
moves forward: Started and Heartbeat renew it, for the stream and token it went out under.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence

from schedd.dispatch._config import REASON_LEASE_EXPIRED, REASON_WORKER_SILENT, InFlight
from schedd.dispatch._holders import silent_holds
from schedd.dispatch._session import WorkerSession
from schedd.v1 import worker_pb2

# The dispatcher's logger: these lines name it in the logs, as they did before the table
# was its own module.
log = logging.getLogger("schedd.dispatch._dispatcher")


class InFlightTable:
    """In-flight executions by execution id, each with the stream it is on.

    Contract:
        * An execution is on at most one stream; :meth:`track` of an id already tracked
          replaces the entry (the caller dropped or cancelled the old one first).
        * A stream's ``in_flight`` set holds exactly the ids tracked on it.
        * :meth:`current` and :meth:`renew` match an entry only under its token and stream:
          a late message from an older dispatch changes nothing.
    """

    def __init__(self, node_id: str) -> None:
        self._node_id = node_id
        self._flights: dict[str, InFlight] = {}
        self._session_of: dict[str, WorkerSession] = {}

    @property
    def flights(self) -> Mapping[str, InFlight]:
        """The entries by execution id (a live view: do not keep it across awaits)."""
        return self._flights

    def __len__(self) -> int:
        return len(self._flights)

    def get(self, execution_id: str) -> InFlight | None:
        return self._flights.get(execution_id)

    def session_of(self, execution_id: str) -> WorkerSession | None:
        return self._session_of.get(execution_id)

    def track(self, session: WorkerSession, d: worker_pb2.Dispatch, now: int, until: int) -> None:
        """``d`` is in flight on ``session`` from ``now``, its lease running to ``until``."""
        self._flights[d.execution_id] = InFlight(d, session.worker_id, now, until)
        self._session_of[d.execution_id] = session
        session.in_flight.add(d.execution_id)

    def drop(self, execution_id: str) -> tuple[WorkerSession, InFlight] | None:
        """Take the execution off the table; its stream and entry (None: it was not on it)."""
        flight = self._flights.pop(execution_id, None)
        session = self._session_of.pop(execution_id, None)
        if flight is None or session is None:
            return None
        session.in_flight.discard(execution_id)
        return session, flight

    def current(self, execution_id: str, token: int, session: WorkerSession) -> InFlight | None:
        """The entry if the execution is in flight under ``token`` on ``session``."""
        flight = self._flights.get(execution_id)
        if flight is None or flight.dispatch.fencing_token != token:
            return None
        return flight if self._session_of.get(execution_id) is session else None

    def renew(self, session: WorkerSession, items: list[tuple[str, int]], deadline: int) -> None:
        """Started or heartbeat ``(execution id, token)`` pairs from ``session``: each current
        entry is marked started and its lease runs to ``deadline`` at least."""
        for eid, token in items:
            flight = self.current(eid, token, session)
            if flight is not None:
                flight.started = True
                flight.lease_deadline_ms = max(flight.lease_deadline_ms, deadline)

    def drop_reported(
        self, session: WorkerSession, results: Sequence[worker_pb2.Result]
    ) -> list[worker_pb2.Result]:
        """Take off the table what ``results`` report under the current token and stream;
        returns those results (the others are late or stale)."""
        current = []
        for r in results:
            if self.current(r.execution_id, r.fencing_token, session) is not None:
                self.drop(r.execution_id)
                current.append(r)
        return current

    def drop_stale(
        self,
        session: WorkerSession,
        stale: Iterable[str],
        heartbeats: Sequence[worker_pb2.Heartbeat],
    ) -> None:
        """The node refused these heartbeats' tokens: each execution gets a Cancel for the
        token it was heartbeated under, and leaves the table if that token is its current."""
        tokens = {h.execution_id: h.fencing_token for h in heartbeats}
        for eid in stale:
            token = tokens.get(eid, 0)
            session.send_cancel(eid, token, "stale fencing token")
            flight = self._flights.get(eid)
            if flight is not None and flight.dispatch.fencing_token == token:
                self.drop(eid)

    def drop_silent(
        self, sessions: Iterable[WorkerSession], now: int, silent_after_ms: int
    ) -> list[InFlight]:
        """Take back what silent streams hold unstarted (see :func:`silent_holds`), each with
        a Cancel to its worker; returns the entries dropped."""
        lost: list[InFlight] = []
        for s, flight in silent_holds(sessions, self._flights, now, silent_after_ms):
            eid = flight.dispatch.execution_id
            self.drop(eid)
            s.send_cancel(eid, flight.dispatch.fencing_token, REASON_WORKER_SILENT)
            lost.append(flight)
        return lost

    def drop_expired(self, now: int, lease_timeout_ms: int) -> list[InFlight]:
        """Drop every entry whose lease has run out at ``now``, sending its worker a Cancel;
        one warning per worker says how many. Returns the entries dropped."""
        expired = [f for f in self._flights.values() if f.lease_deadline_ms <= now]
        by_worker: dict[str, int] = {}
        for f in expired:
            dropped = self.drop(f.dispatch.execution_id)
            if dropped is not None:
                dropped[0].send_cancel(
                    f.dispatch.execution_id, f.dispatch.fencing_token, REASON_LEASE_EXPIRED
                )
            by_worker[f.worker_id] = by_worker.get(f.worker_id, 0) + 1
            if log.isEnabledFor(logging.DEBUG):
                log.debug(
                    "%s: lease on worker %s expired (token %d, %s)",
                    f.dispatch.execution_id,
                    f.worker_id,
                    f.dispatch.fencing_token,
                    "started" if f.started else "not started",
                    extra=self._fields(f),
                )
        for worker_id, n in by_worker.items():
            log.warning(
                "worker %s: %d leases expired (nothing heard of them for %d ms); cancelling "
                "them there and handing them out again",
                worker_id, n, lease_timeout_ms,
                extra={"node": self._node_id, "worker": worker_id},
            )  # fmt: skip
        return expired

    def _fields(self, f: InFlight) -> dict[str, object]:
        """``extra=`` of a line about one execution out on a worker."""
        d = f.dispatch
        return {
            "node": self._node_id,
            "worker": f.worker_id,
            "job": d.job_id,
            "execution": d.execution_id,
            "token": d.fencing_token,
        }

"""Probes: before a node hands out again an execution it took over from a failed owner, it
asks the connected workers whether the execution already runs or ran there.

Why: the failed owner may have sent it to a worker that is still running it, or that finished
it after the owner died (the result then sits in that worker's ledger, undelivered). Sending it
afresh would run it a second time on another worker, under a newer token the fenced sink
accepts. A probe (``Dispatch.probe``) uses no credit and starts nothing: the worker running it
adopts the new token (answers Started), one that ran it answers the Result from its ledger
under the new token, the others answer ``not_here``. The execution is handed out afresh only
once every worker asked said not here, left, or did not answer within the deadline.

The window that stays: a worker that runs (or ran) it and is not connected to the new owner
when the probe goes out (see docs/guarantees.md).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from schedd.dispatch._pending import accepts, route_of
from schedd.v1 import worker_pb2

if TYPE_CHECKING:
    from schedd.dispatch._session import WorkerSession

log = logging.getLogger(__name__)

#: How long a probe waits for the workers' answers before the execution is handed out afresh.
PROBE_TIMEOUT_MS = 1_000

#: Called once per probed execution: True when a worker took it (it runs or ran there; its
#: Started or Result follows as for any dispatch), False when it is to be handed out afresh.
ProbeAnswer = Callable[[str, bool], None]

#: How a taken probe becomes in flight on the session that answered.
Track = Callable[["WorkerSession", worker_pb2.Dispatch], None]


@dataclass
class Probe:
    dispatch: worker_pb2.Dispatch
    waiting: set[int]
    deadline_ms: int
    answer: ProbeAnswer
    asked: int = field(default=0)


class Probes:
    """The probes a dispatcher has out, by execution id (the sessions are the dispatcher's)."""

    def __init__(self) -> None:
        self._out: dict[str, Probe] = {}
        self.sent = 0
        self.taken = 0
        self.absent = 0

    def __len__(self) -> int:
        return len(self._out)

    def __contains__(self, execution_id: object) -> bool:
        return execution_id in self._out

    def add(
        self, d: worker_pb2.Dispatch, sessions: set[int], deadline_ms: int, answer: ProbeAnswer
    ) -> None:
        self._out[d.execution_id] = Probe(d, sessions, deadline_ms, answer, len(sessions))
        self.sent += 1

    def send(
        self,
        sessions: list[WorkerSession],
        dispatches: Iterable[worker_pb2.Dispatch],
        deadline_ms: int,
        answer: ProbeAnswer,
    ) -> None:
        """Probe each dispatch on the ``sessions`` that may take its route (none: answered
        False at once)."""
        used: set[WorkerSession] = set()
        for d in dispatches:
            asked = [
                s
                for s in sessions
                if accepts(s.hello, route_of(d)) and (s.tenants is None or d.tenant in s.tenants)
            ]
            if not asked:
                answer(d.execution_id, False)
                continue
            self.add(d, {s.session_id for s in asked}, deadline_ms, answer)
            msg = worker_pb2.Dispatch()
            msg.CopyFrom(d)
            msg.probe = True
            for session in asked:
                session.send_probe(msg)
            used.update(asked)
        for session in used:
            session.flush()

    def answers(self, session: WorkerSession, batch: worker_pb2.WorkerBatch, track: Track) -> None:
        """Started or Result under a probed token: the execution is in flight on ``session``
        from now on (``track``), and its Started and Result are handled as for any dispatch.
        ``not_here`` counts the session out."""
        taken = [(s.execution_id, s.fencing_token) for s in batch.started]
        taken += [(r.execution_id, r.fencing_token) for r in batch.results]
        for eid, token in taken:
            d = self.take(eid, token, session.session_id)
            if d is not None:
                track(session, d)
        if batch.not_here:
            self.not_here(batch.not_here, session.session_id)

    def take(self, execution_id: str, token: int, session_id: int) -> worker_pb2.Dispatch | None:
        """A worker on ``session_id`` answered with a Started or Result under ``token``: the
        execution is that session's now. Returns the probe's dispatch, or None when this is
        no answer to a probe out."""
        probe = self._out.get(execution_id)
        if probe is None or probe.dispatch.fencing_token != token:
            return None
        if session_id not in probe.waiting:
            return None
        del self._out[execution_id]
        self.taken += 1
        _call(probe, True)
        return probe.dispatch

    def not_here(self, execution_ids: Iterable[str], session_id: int) -> None:
        for eid in execution_ids:
            probe = self._out.get(eid)
            if probe is not None:
                probe.waiting.discard(session_id)
                if not probe.waiting:
                    self._absent(eid, probe)

    def session_closed(self, session_id: int) -> None:
        for eid, probe in list(self._out.items()):
            probe.waiting.discard(session_id)
            if not probe.waiting:
                self._absent(eid, probe)

    def expire(self, now_ms: int) -> None:
        for eid, probe in list(self._out.items()):
            if probe.deadline_ms <= now_ms:
                log.info(
                    "probe for %s: %d of %d workers did not answer in time; handing it out",
                    eid,
                    len(probe.waiting),
                    probe.asked,
                )
                self._absent(eid, probe)

    def drop(self, execution_ids: Iterable[str]) -> None:
        """Forget these probes without an answer (their partition went away)."""
        for eid in execution_ids:
            self._out.pop(eid, None)

    def clear(self) -> None:
        self._out.clear()

    def _absent(self, eid: str, probe: Probe) -> None:
        del self._out[eid]
        self.absent += 1
        _call(probe, False)


def _call(probe: Probe, taken: bool) -> None:
    try:
        probe.answer(probe.dispatch.execution_id, taken)
    except Exception:
        log.exception("probe answer for %s failed", probe.dispatch.execution_id)

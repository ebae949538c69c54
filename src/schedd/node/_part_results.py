"""A partition's results: what workers report about its executions, applied under its lock.

Starts and heartbeats (with checkpoints) update the live executions; a result is accepted
only with the execution's current token and settled by the
:func:`~._settle_policy.settle` policy in one fenced write per batch; executions a worker lost
are re-tokened and handed out again. Each result gets a :class:`Verdict`; the node's
:class:`~._settling.ResultRouter` turns verdicts into the wire's acks.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Sequence

from schedd.model import MAX_CHECKPOINT_BYTES
from schedd.node._live import Live
from schedd.node._part_core import PartitionCore, carried_by
from schedd.node._settle_policy import ENDED, Fate, Settlement, finish, first_line, settle
from schedd.store import RUN, DueEntry, Item, parse_execution_id
from schedd.v1 import execution_pb2, worker_pb2

log = logging.getLogger(__name__)


class Verdict(enum.Enum):
    """What became of one reported result."""

    ACCEPTED = "accepted"
    #: Not the execution's current token (or no such execution here): the worker drops it.
    STALE = "stale"
    #: A second result for one execution in one batch: the first is settled.
    DUPLICATE = "duplicate"
    #: The execution changed in the store meanwhile: re-read; the worker drops it.
    CHANGED = "changed"
    #: Nothing is known written: the execution is handed out again, and the worker's ledger
    #: answers with the outcome it recorded.
    NOT_WRITTEN = "not written"


#: One result's verdict, by its index in the worker's batch, with a message for the worker.
Judged = tuple[int, Verdict, str]
NOT_OWNED = "this node does not own the partition"


class Settling(PartitionCore):
    """The result path of a partition."""

    def started(self, worker_id: str, s: worker_pb2.Started) -> None:
        live = self.live.get(s.execution_id)
        if live is not None and live.ex.fencing_token == s.fencing_token:
            live.ex.state = execution_pb2.EXECUTION_RUNNING
            live.ex.started_ms = s.started_ms
            live.ex.worker_id = worker_id

    async def heartbeats(self, worker_id: str, beats: Sequence[worker_pb2.Heartbeat]) -> list[str]:
        """Records heartbeats and their checkpoints; returns the executions whose token is
        stale (the worker is told to cancel them)."""
        stale: list[str] = []
        saved: list[Live] = []
        for hb in beats:
            live = self.live.get(hb.execution_id)
            if live is None or live.ex.fencing_token != hb.fencing_token:
                stale.append(hb.execution_id)
            elif hb.has_checkpoint:
                if len(hb.checkpoint) > MAX_CHECKPOINT_BYTES:
                    log.warning(
                        "%s: checkpoint of %d bytes ignored", hb.execution_id, len(hb.checkpoint),
                        extra={**self.run_fields(live.ex), "worker": worker_id},
                    )  # fmt: skip
                    continue
                live.ex.checkpoint = hb.checkpoint
                saved.append(live)
        if saved:
            await self._save_checkpoints(saved)
        return stale

    async def _save_checkpoints(self, lives: list[Live]) -> None:
        """Writes these executions' new checkpoints (one fenced batch): from then on they
        survive this node. One not written stays in memory, where the next heartbeat's
        checkpoint or a redelivery (which writes the run key) takes it on."""
        async with self.lock:
            current = [lv for lv in lives if self.live.get(lv.ex.id) is lv]
            if current:
                items = [self.store.save_checkpoint(lv.ex) for lv in current]
                await self.write(items, carried_by(lv.ex for lv in current), "checkpoints",
                                 sort=False)  # fmt: skip

    def reported(self, results: Sequence[worker_pb2.Result]) -> None:
        """Attempts that ended (not one a worker gave back, CANCELLED: it is handed out
        again) stop counting as running for the overlap policies now, not when their result
        is settled, which may be deferred for a dispatch backlog."""
        for r in results:
            if r.outcome in ENDED:
                self.running.discard(parse_execution_id(r.execution_id)[0], r.execution_id)

    async def settle(
        self, group: Sequence[tuple[int, worker_pb2.Result]], worker_id: str
    ) -> list[Judged]:
        """Settles a worker's results for this partition: one verdict per result."""
        try:
            async with self.lock:
                if self._stopping:  # it moved while this waited for its lock
                    return [(n, Verdict.NOT_WRITTEN, NOT_OWNED) for n, _ in group]
                return await self._settle(group, worker_id)
        except Exception:
            log.exception(
                "partition %d: settling %d results failed", self.partition, len(group),
                extra={**self.log_fields, "worker": worker_id},
            )  # fmt: skip
            ids = [r.execution_id for _, r in group if self._current(r)]
            self.doubt((parse_execution_id(e)[0] for e in ids), ids)
            msg = "the node could not settle the result; it will be redelivered"
            return [(n, Verdict.NOT_WRITTEN, msg) for n, _ in group]

    def _current(self, r: worker_pb2.Result) -> bool:
        live = self.live.get(r.execution_id)
        return live is not None and live.ex.fencing_token == r.fencing_token

    async def _settle(
        self, group: Sequence[tuple[int, worker_pb2.Result]], worker_id: str
    ) -> list[Judged]:
        now = self.clock.now_ms()
        out: list[Judged] = []
        todo: list[tuple[int, Live, worker_pb2.Result, Settlement]] = []
        seen: set[str] = set()
        for n, r in group:
            live = self.live.get(r.execution_id)
            if live is None or live.ex.fencing_token != r.fencing_token:
                current = live.ex.fencing_token if live else None
                msg = f"token {r.fencing_token} is stale (current: {current or 'none'})"
                out.append((n, Verdict.STALE, msg))
                continue
            # Two writes of one run key in one txn are refused whole. Only a current result
            # counts: a stale one before it (the old token's, next to a probe's answer from
            # the ledger under the new one) must not shadow it.
            if r.execution_id in seen:
                out.append((n, Verdict.DUPLICATE, "a second result for this execution in one "
                                                  "batch; the first is settled"))  # fmt: skip
                continue
            seen.add(r.execution_id)
            if not live.ex.worker_id:  # no Started came: it was folded into this Result
                live.ex.worker_id = worker_id
            cached = self.jobs.get(live.ex.job_id)
            job = cached.job if cached else None
            decision = settle(live.ex, r, job, now, cancelling=live.cancelling, rng=self.rng)
            todo.append((n, live, r, decision))
        if todo:
            out += await self._write_settled(todo, now)
        return out

    def _item(self, live: Live, s: Settlement, r: worker_pb2.Result) -> Item:
        if s.fate in (Fate.SUCCEEDED, Fate.CANCELLED):
            ok = s.fate is Fate.SUCCEEDED
            state = execution_pb2.EXECUTION_SUCCEEDED if ok else execution_pb2.EXECUTION_CANCELLED
            ex = live.ex
            then = self.tell_children(ex.job_id, ex.scheduled_ms, state, r.error)
            return self.store.finish_run(ex, then=then)
        if s.fate is Fate.DEAD:
            assert s.record is not None
            return self.store.finish_run(live.ex, dead_record=s.record, then=self.told(s.record))
        assert s.record is not None
        return self.store.rewrite_run(s.record, add_due_ms=s.retry_due_ms)

    async def _write_settled(
        self, todo: list[tuple[int, Live, worker_pb2.Result, Settlement]], now: int
    ) -> list[Judged]:
        items = [self._item(live, s, r) for _, live, r, s in todo]
        carried = carried_by(live.ex for _, live, _, _ in todo)
        written = await self.write(items, carried, "result", orphans=True)
        if written is None:
            return [(n, Verdict.NOT_WRITTEN, "the result was not written; it will be handed out "
                                             "again") for n, _, _, _ in todo]  # fmt: skip
        out: list[Judged] = []
        finished: list[execution_pb2.Execution] = []
        resend: list[Live] = []
        for i, ((n, live, r, s), rev) in enumerate(zip(todo, written.revisions, strict=True)):
            if rev:
                out.append((n, Verdict.ACCEPTED, ""))
                self._settled(live, r, s, rev, finished, resend)
                continue
            self.drop(live)  # re-read: sort_out doubted it, or refused it with backoff
            if i in written.rejected:
                why = written.rejected[i]
                msg = f"the store refused this result's write ({why}); it will be handed out again"
                out.append((n, Verdict.NOT_WRITTEN, msg))
            else:
                out.append((n, Verdict.CHANGED, "execution changed meanwhile"))
        self.history.record(finished)
        self.send(resend, now)
        return out

    def _settled(
        self,
        live: Live,
        r: worker_pb2.Result,
        s: Settlement,
        rev: int,
        finished: list[execution_pb2.Execution],
        resend: list[Live],
    ) -> None:
        """Memory after a settled result (its write holds at revision ``rev``)."""
        ex = live.ex
        if self.refusals:
            self.refusals.forget(ex.id)
        if s.fate is Fate.REDELIVER:
            log.debug(
                "%s: %s under token %d, handed out again under token %d", ex.id,
                worker_pb2.Outcome.Name(r.outcome), r.fencing_token, rev,
                extra=self.run_fields(ex, rev),
            )  # fmt: skip
            self.running.discard(ex.job_id, ex.id)
            ex.fencing_token = rev
            ex.worker_id = ""
            resend.append(live)
            return
        self.drop(live)
        if s.fate in (Fate.SUCCEEDED, Fate.CANCELLED):
            finish(ex, r, self.clock.now_ms())
            if s.fate is Fate.SUCCEEDED:
                ex.state = execution_pb2.EXECUTION_SUCCEEDED
                ex.result = r.output
            else:
                ex.state = execution_pb2.EXECUTION_CANCELLED
                ex.reason = "cancelled by the overlap policy or an API change"
            finished.append(ex)
        elif s.fate is Fate.DEAD:
            assert s.record is not None
            s.record.fencing_token = ex.fencing_token
            finished.append(s.record)
            self.recorder.dead_lettered()
            log.info(
                "execution %s is a dead letter: %s (%s)", ex.id, s.record.reason,
                first_line(s.record.error) or worker_pb2.Outcome.Name(r.outcome),
                extra=self.run_fields(s.record),
            )  # fmt: skip
        else:  # RETRY
            log.debug(
                "execution %s: %s; attempt %d in %d ms", ex.id,
                first_line(r.error) or worker_pb2.Outcome.Name(r.outcome), ex.attempt + 1,
                s.retry_due_ms - self.clock.now_ms(), extra=self.run_fields(ex, rev),
            )  # fmt: skip
            self.add_due(
                DueEntry(self.partition, s.retry_due_ms, ex.job_id, RUN, ex.scheduled_ms, rev)
            )
        waiting = self.running.buffered.get(ex.job_id)
        if waiting is not None and ex.job_id not in self.running and waiting.ex.id in self.live:
            resend.append(waiting)

    async def lost(self, lives: Sequence[Live], reason: str) -> None:
        """A worker vanished or let a lease run out: each is handed out again with a new,
        larger token (under the partition's lock; skipped if the partition moved)."""
        async with self.lock:
            if self._stopping:  # its new owner redelivers them (takeover)
                return
            current = [lv for lv in lives if self.live.get(lv.ex.id) is lv]
            if current:
                await self._redeliver(current, reason)

    async def _redeliver(self, lives: list[Live], reason: str) -> None:
        items = []
        for live in lives:
            ex = execution_pb2.Execution()
            ex.CopyFrom(live.ex)
            ex.state = execution_pb2.EXECUTION_PENDING
            ex.worker_id = ""
            items.append(self.store.rewrite_run(ex))
        written = await self.write(items, carried_by(lv.ex for lv in lives), "redelivery",
                                   orphans=True)  # fmt: skip
        if written is None:
            return
        resend = []
        for live, rev in zip(lives, written.revisions, strict=True):
            self.running.discard(live.ex.job_id, live.ex.id)
            if not rev:
                self.drop(live)  # re-read (see write)
                continue
            log.debug(
                "%s: %s; handed out again under token %d", live.ex.id, reason, rev,
                extra=self.run_fields(live.ex, rev),
            )  # fmt: skip
            live.ex.fencing_token = rev
            live.ex.worker_id = ""
            resend.append(live)
        log.info(
            "partition %d: redelivering %d executions (%s)", self.partition, len(resend), reason,
            extra=self.log_fields,
        )  # fmt: skip
        self.send(resend, self.clock.now_ms())

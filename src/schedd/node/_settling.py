"""Settling: what workers report about executions, decided with fenced compare-on-token writes.

The :class:`Settler` is the node's :class:`~schedd.dispatch.ExecutionAuthority`: the dispatcher
hands it starts, heartbeats, results and losses, and it decides per owned partition, under that
partition's lock. A result is accepted only with the execution's current token: success ends
the run, a failure with attempts left becomes a retry (a durable due entry at now + backoff with
full jitter), the last failure a dead letter; a lost worker's executions are re-tokened and
handed out again. A write that fails or whose outcome is unknown doubts what it carried
(:meth:`~._partition.Partition.doubt`): the partition re-reads it from etcd.
"""

from __future__ import annotations

import asyncio
import logging
import random
from dataclasses import dataclass

import grpc

from schedd._clock import Clock
from schedd._errors import FencedOut, SchedError
from schedd.dispatch import InFlight
from schedd.history import History
from schedd.model._fields import MAX_CHECKPOINT_BYTES
from schedd.node._config import NodeConfig
from schedd.node._firing import Firer
from schedd.node._live import Live, OwnedPartitions
from schedd.node._partition import Partition
from schedd.obs import MetricsRecorder, NoopRecorder
from schedd.schedule import retry_backoff_ms
from schedd.store import RUN, DueEntry, Item, parse_execution_id
from schedd.v1 import execution_pb2, job_pb2, worker_pb2

log = logging.getLogger(__name__)

_FAILED = (worker_pb2.OUTCOME_FAILED, worker_pb2.OUTCOME_TIMED_OUT)
_ENDED = frozenset({worker_pb2.OUTCOME_SUCCEEDED, worker_pb2.OUTCOME_FAILED_PERMANENT, *_FAILED})
_NOT_OWNED = "this node does not own the partition"
#: The most of a failed attempt's output kept with the execution (its run key while it waits
#: to be retried, its dead letter): a settle transaction of 128 items must stay well under
#: etcd's request limit (1.5 MiB). Longer output is dropped there; the error text stays.
FAILED_OUTPUT_KEPT = 8 * 1024


@dataclass(slots=True)
class _Decision:
    live: Live
    result: worker_pb2.Result
    item: Item
    final: execution_pb2.Execution | None = None  # the finished record, when built up front
    # SUCCEEDED or CANCELLED: the record is ``live.ex`` itself, finished once the txn holds
    # (no copy: the execution leaves memory then).
    end_state: int = 0
    retry_due_ms: int = 0
    redeliver: bool = False


class Settler:
    """Applies what workers report to the executions of the partitions this node runs."""

    def __init__(
        self,
        config: NodeConfig,
        clock: Clock,
        history: History,
        partitions: OwnedPartitions,
        firer: Firer,
        *,
        rng: random.Random | None = None,
        recorder: MetricsRecorder | None = None,
    ) -> None:
        self.config = config
        self.clock = clock
        self.history = history
        self._partitions = partitions
        self.firer = firer
        self.rng = rng or random.Random()
        self.recorder: MetricsRecorder = recorder or NoopRecorder()

    def _fields(
        self, partition: Partition, ex: execution_pb2.Execution | None = None, **more: object
    ) -> dict[str, object]:
        """``extra=`` of a log line about a partition (node, partition) or one of its
        executions (job, execution, token too)."""
        fields: dict[str, object] = {"node": self.config.node_id, "partition": partition.partition}
        if ex is not None:
            fields.update(job=ex.job_id, execution=ex.id)
            if ex.fencing_token:
                fields["token"] = ex.fencing_token
        fields.update(more)
        return fields

    async def on_started(self, worker_id: str, started: list[worker_pb2.Started]) -> None:
        for s in started:
            partition = self._partitions.of_execution(s.execution_id)
            live = partition.live.get(s.execution_id) if partition else None
            if live is not None and live.ex.fencing_token == s.fencing_token:
                live.ex.state = execution_pb2.EXECUTION_RUNNING
                live.ex.started_ms = s.started_ms
                live.ex.worker_id = worker_id

    async def on_heartbeats(
        self, worker_id: str, heartbeats: list[worker_pb2.Heartbeat]
    ) -> list[str]:
        stale: list[str] = []
        saved: dict[int, tuple[Partition, list[Live]]] = {}
        for hb in heartbeats:
            partition = self._partitions.of_execution(hb.execution_id)
            if partition is None:
                # Not this node's partition (any more): its owner judges the token. Handed
                # over, the new owner's probe adopts the execution under a new token; a
                # cancel from here would race that probe and have it run again.
                continue
            live = partition.live.get(hb.execution_id)
            if live is None or live.ex.fencing_token != hb.fencing_token:
                stale.append(hb.execution_id)
            elif hb.has_checkpoint:
                if len(hb.checkpoint) > MAX_CHECKPOINT_BYTES:
                    log.warning(
                        "%s: checkpoint of %d bytes ignored", hb.execution_id, len(hb.checkpoint),
                        extra=self._fields(partition, live.ex, worker=worker_id),
                    )  # fmt: skip
                    continue
                live.ex.checkpoint = hb.checkpoint
                saved.setdefault(partition.partition, (partition, []))[1].append(live)
        if saved:
            await asyncio.gather(*(self._save_checkpoints(p, lives) for p, lives in saved.values()))
        return stale

    async def _save_checkpoints(self, partition: Partition, lives: list[Live]) -> None:
        """Writes these executions' new checkpoints to etcd (one fenced batch): from then on
        they survive this node. A failure leaves them in memory, where the next heartbeat's
        checkpoint or a redelivery (which writes the run key) takes them on."""
        async with partition.lock:
            current = [lv for lv in lives if partition.live.get(lv.ex.id) is lv]
            if not current:
                return
            try:
                await partition.store.apply(
                    [partition.store.save_checkpoint(lv.ex) for lv in current]
                )  # one refused or failed stays in memory (see the docstring)
            except FencedOut as exc:
                partition.fenced_out(exc)
            except SchedError as exc:
                log.warning(
                    "partition %d: checkpoints not saved: %s", partition.partition, exc,
                    extra=self._fields(partition),
                )  # fmt: skip

    def on_reported(self, results: list[worker_pb2.Result]) -> None:
        """An attempt that ended (not one a worker gave back, CANCELLED: it is handed out
        again) stops counting as running for the overlap policies now, not when its result is
        settled, which may be deferred for a dispatch backlog."""
        for r in results:
            if r.outcome in _ENDED:
                job_id, _ = parse_execution_id(r.execution_id)
                self.firer.running.discard(job_id, r.execution_id)

    async def on_results(
        self, worker_id: str, results: list[worker_pb2.Result]
    ) -> list[worker_pb2.ResultAck]:
        acks: dict[int, worker_pb2.ResultAck] = {}
        groups: dict[int, tuple[Partition, list[tuple[int, worker_pb2.Result]]]] = {}
        for n, r in enumerate(results):
            partition = self._partitions.of_execution(r.execution_id)
            if partition is None:
                acks[n] = _ack(r, False, grpc.StatusCode.UNAVAILABLE, _NOT_OWNED)
                continue
            groups.setdefault(partition.partition, (partition, []))[1].append((n, r))
        # Partitions settle concurrently: each has its own lock, fence and transactions, and a
        # round would otherwise cost one etcd round trip per partition in turn.
        settled = await asyncio.gather(
            *(
                self._settle_group(partition, group, worker_id)
                for partition, group in groups.values()
            )
        )
        for part in settled:
            for n, ack in part:
                acks[n] = ack
        return [acks[n] for n in range(len(results))]

    async def _settle_group(
        self,
        partition: Partition,
        group: list[tuple[int, worker_pb2.Result]],
        worker_id: str,
    ) -> list[tuple[int, worker_pb2.ResultAck]]:
        try:
            async with partition.lock:
                # The partition may have moved while this waited for its lock.
                if not self._partitions.is_current(partition):
                    return _refused(group, _NOT_OWNED)
                return await self._apply_results(partition, group, worker_id)
        except Exception:
            log.exception(
                "partition %d: settling %d results failed", partition.partition, len(group),
                extra=self._fields(partition, worker=worker_id),
            )  # fmt: skip
            ids = [r.execution_id for _, r in group if _current(partition, r)]
            partition.doubt((parse_execution_id(e)[0] for e in ids), ids)
            return _refused(group, "the node could not settle the result; it will be redelivered")

    async def _apply_results(
        self,
        partition: Partition,
        group: list[tuple[int, worker_pb2.Result]],
        worker_id: str,
    ) -> list[tuple[int, worker_pb2.ResultAck]]:
        now = self.clock.now_ms()
        out: list[tuple[int, worker_pb2.ResultAck]] = []
        decisions: list[tuple[int, _Decision]] = []
        seen: set[str] = set()
        for n, r in group:
            if r.execution_id in seen:  # two writes of one run key in one txn: refused whole
                msg = "a second result for this execution in one batch; the first is settled"
                out.append((n, _ack(r, False, grpc.StatusCode.FAILED_PRECONDITION, msg)))
                continue
            seen.add(r.execution_id)
            live = partition.live.get(r.execution_id)
            if live is None or live.ex.fencing_token != r.fencing_token:
                current = live.ex.fencing_token if live else None
                msg = f"token {r.fencing_token} is stale (current: {current or 'none'})"
                out.append((n, _ack(r, False, grpc.StatusCode.FAILED_PRECONDITION, msg)))
                continue
            if not live.ex.worker_id:  # no Started came: it was folded into this Result
                live.ex.worker_id = worker_id
            decisions.append((n, self._decide(partition, live, r, now)))
        if not decisions:
            return out
        try:
            applied = await partition.store.apply([d.item for _, d in decisions])
        except (FencedOut, SchedError) as exc:
            if isinstance(exc, FencedOut):
                partition.fenced_out(exc)
            else:  # unknown outcome: re-read; what etcd still holds unchanged goes out again
                lives = [d.live.ex for _, d in decisions]
                partition.doubt((ex.job_id for ex in lives), (ex.id for ex in lives))
            return out + [
                (n, _ack(d.result, False, grpc.StatusCode.UNAVAILABLE, str(exc)))
                for n, d in decisions
            ]
        finished: list[execution_pb2.Execution] = []
        resend: list[Live] = []
        for i, ((n, d), good, rev) in enumerate(
            zip(decisions, applied.ok, applied.revisions, strict=True)
        ):
            if i in applied.rejected:
                out.append((n, self._rejected(partition, d, applied.rejected[i])))
                continue
            if not good:
                partition.live.pop(d.live.ex.id, None)
                partition.doubt([d.live.ex.job_id])
                out.append(
                    (
                        n,
                        _ack(
                            d.result,
                            False,
                            grpc.StatusCode.FAILED_PRECONDITION,
                            "execution changed meanwhile",
                        ),
                    )
                )
                continue
            out.append((n, _accepted(d.result)))
            self._after(partition, d, rev, finished, resend)
        self.history.record(finished)
        self.firer.dispatch(partition, resend, now)
        return out

    def _rejected(self, partition: Partition, d: _Decision, why: str) -> worker_pb2.ResultAck:
        """The store refused this result's write on its own: nothing of it was written. The
        execution leaves memory (nothing has it in flight now) and is re-read with backoff;
        etcd still holds it as it was, so it is handed out again and the worker's ledger
        answers with the outcome it recorded."""
        ex = d.live.ex
        partition.live.pop(ex.id, None)
        self.firer.running.discard(ex.job_id, ex.id)
        partition.refused("result", ex.job_id, ex.id, why)
        msg = f"the store refused this result's write ({why}); it will be handed out again"
        return _ack(d.result, False, grpc.StatusCode.UNAVAILABLE, msg)

    def _decide(
        self, partition: Partition, live: Live, r: worker_pb2.Result, now: int
    ) -> _Decision:
        if r.outcome == worker_pb2.OUTCOME_SUCCEEDED:
            end = execution_pb2.EXECUTION_SUCCEEDED
            return _Decision(live, r, partition.store.finish_run(live.ex), end_state=end)
        if r.outcome == worker_pb2.OUTCOME_CANCELLED and live.cancelling:
            end = execution_pb2.EXECUTION_CANCELLED
            return _Decision(live, r, partition.store.finish_run(live.ex), end_state=end)
        ex = _copy(live.ex)
        _finish(ex, r, now)
        if r.outcome == worker_pb2.OUTCOME_CANCELLED:
            # The worker shut down before finishing it: hand it out again, same attempt.
            ex.state = execution_pb2.EXECUTION_PENDING
            ex.worker_id = ""
            return _Decision(live, r, partition.store.rewrite_run(ex), redeliver=True)
        max_attempts = ex.max_attempts or 3
        if r.outcome in _FAILED and ex.attempt < max_attempts:
            return self._retry(partition, live, r, ex, now)
        ex.state = execution_pb2.EXECUTION_DEAD
        ex.reason = f"attempt {ex.attempt} of {max_attempts} failed"
        return _Decision(live, r, partition.store.finish_run(live.ex, dead_record=ex), final=ex)

    def _retry(
        self,
        partition: Partition,
        live: Live,
        r: worker_pb2.Result,
        ex: execution_pb2.Execution,
        now: int,
    ) -> _Decision:
        cached = partition.jobs.get(ex.job_id)
        retry = cached.job.retry if cached else job_pb2.RetryPolicy()
        delay = retry_backoff_ms(
            ex.attempt,
            initial_ms=retry.initial_backoff_ms or 1000,
            max_ms=retry.max_backoff_ms or 300_000,
            multiplier=retry.multiplier or 2.0,
            rng=self.rng,
        )
        if r.retry_after_ms > delay:  # the target's own word (Retry-After), within max backoff
            delay = min(r.retry_after_ms, max(delay, retry.max_backoff_ms or 300_000))
        ex.state = execution_pb2.EXECUTION_RETRY_WAIT
        ex.attempt += 1
        ex.due_ms = now + max(1, delay)
        ex.worker_id = ""
        ex.fencing_token = live.ex.fencing_token
        item = partition.store.rewrite_run(ex, add_due_ms=ex.due_ms)
        return _Decision(live, r, item, retry_due_ms=ex.due_ms)

    def _after(
        self,
        partition: Partition,
        d: _Decision,
        rev: int,
        finished: list[execution_pb2.Execution],
        resend: list[Live],
    ) -> None:
        eid, job_id = d.live.ex.id, d.live.ex.job_id
        self.firer.running.discard(job_id, eid)
        if partition.refusals:
            partition.refusals.forget(eid)
        if d.redeliver:
            log.debug(
                "%s: %s under token %d, handed out again under token %d",
                eid,
                worker_pb2.Outcome.Name(d.result.outcome),
                d.result.fencing_token,
                rev,
                extra=self._fields(partition, d.live.ex, token=rev),
            )
            d.live.ex.fencing_token = rev
            d.live.ex.worker_id = ""
            resend.append(d.live)
            return
        partition.live.pop(eid, None)
        if d.end_state:
            ex = d.live.ex
            _finish(ex, d.result, self.clock.now_ms())
            ex.state = d.end_state  # type: ignore[assignment]
            if d.end_state == execution_pb2.EXECUTION_SUCCEEDED:
                ex.result = d.result.output
            else:
                ex.reason = "cancelled by the overlap policy or an API change"
            finished.append(ex)
        elif d.final is not None:
            d.final.fencing_token = d.live.ex.fencing_token
            finished.append(d.final)
            self.recorder.dead_lettered()
            log.info(
                "execution %s is a dead letter: %s (%s)",
                eid,
                d.final.reason,
                _first_line(d.final.error) or worker_pb2.Outcome.Name(d.result.outcome),
                extra=self._fields(partition, d.final),
            )
        elif d.retry_due_ms:
            log.debug(
                "execution %s: %s; attempt %d in %d ms",
                eid,
                _first_line(d.result.error) or worker_pb2.Outcome.Name(d.result.outcome),
                d.live.ex.attempt + 1,
                d.retry_due_ms - self.clock.now_ms(),
                extra=self._fields(partition, d.live.ex, token=rev),
            )
        if d.retry_due_ms:
            partition.add_due(
                DueEntry(
                    partition.partition, d.retry_due_ms, job_id, RUN, d.live.ex.scheduled_ms, rev
                )
            )
        waiting = self.firer.running.buffered.get(job_id)
        if (
            waiting is not None
            and job_id not in self.firer.running
            and waiting.ex.id in partition.live
        ):
            resend.append(waiting)

    async def on_lost(self, lost: list[InFlight], reason: str) -> None:
        """A worker vanished or let a lease run out: redeliver each with a new, larger token."""
        by_partition: dict[int, tuple[Partition, list[Live]]] = {}
        for inflight in lost:
            d = inflight.dispatch
            partition = self._partitions.of_execution(d.execution_id)
            live = partition.live.get(d.execution_id) if partition else None
            if partition is None or live is None or live.ex.fencing_token != d.fencing_token:
                continue
            by_partition.setdefault(partition.partition, (partition, []))[1].append(live)
        for partition, lives in by_partition.values():
            async with partition.lock:
                # A partition that moved meanwhile is its new owner's to redeliver (takeover).
                if self._partitions.is_current(partition):
                    await self._redeliver(partition, lives, reason)

    async def _redeliver(self, partition: Partition, lives: list[Live], reason: str) -> None:
        items = []
        for live in lives:
            ex = _copy(live.ex)
            ex.state = execution_pb2.EXECUTION_PENDING
            ex.worker_id = ""
            items.append(partition.store.rewrite_run(ex))
        try:
            applied = await partition.store.apply(items)
        except FencedOut as exc:
            partition.fenced_out(exc)
            return
        except SchedError as exc:
            log.warning(
                "partition %d: redelivery failed: %s", partition.partition, exc,
                extra=self._fields(partition),
            )  # fmt: skip
            partition.doubt((lv.ex.job_id for lv in lives), (lv.ex.id for lv in lives))
            return
        resend = []
        for n, (live, good, rev) in enumerate(
            zip(lives, applied.ok, applied.revisions, strict=True)
        ):
            self.firer.running.discard(live.ex.job_id, live.ex.id)
            if n in applied.rejected:
                partition.live.pop(live.ex.id, None)
                partition.refused("redelivery", live.ex.job_id, live.ex.id, applied.rejected[n])
            elif good:
                log.debug(
                    "%s: %s; handed out again under token %d", live.ex.id, reason, rev,
                    extra=self._fields(partition, live.ex, token=rev),
                )  # fmt: skip
                live.ex.fencing_token = rev
                live.ex.worker_id = ""
                resend.append(live)
            else:
                partition.live.pop(live.ex.id, None)
                partition.doubt([live.ex.job_id])
        log.info(
            "partition %d: redelivering %d executions (%s)",
            partition.partition,
            len(resend),
            reason,
            extra=self._fields(partition),
        )
        self.firer.dispatch(partition, resend, self.clock.now_ms())


def _first_line(text: str, limit: int = 200) -> str:
    """The start of an error text, for a one-line log message."""
    line = text.strip().split("\n", 1)[0]
    return line if len(line) <= limit else line[: limit - 3] + "..."


def _finish(ex: execution_pb2.Execution, r: worker_pb2.Result, now: int) -> None:
    """What every ended or redelivered attempt takes from the worker's result."""
    ex.finished_ms = r.finished_ms or now
    ex.started_ms = r.started_ms or ex.started_ms
    ex.error = r.error
    # A failed attempt's output too (an HTTP answer, a shell's stderr); never an older one's.
    ex.result = r.output if len(r.output) <= FAILED_OUTPUT_KEPT else b""


def _copy(ex: execution_pb2.Execution) -> execution_pb2.Execution:
    out = execution_pb2.Execution()
    out.CopyFrom(ex)
    return out


def _current(partition: Partition, r: worker_pb2.Result) -> bool:
    """Whether this result carries the token of the execution the partition holds."""
    live = partition.live.get(r.execution_id)
    return live is not None and live.ex.fencing_token == r.fencing_token


def _accepted(r: worker_pb2.Result) -> worker_pb2.ResultAck:
    """``_ack(r, True, OK, "")``: code and message are their defaults."""
    return worker_pb2.ResultAck(
        execution_id=r.execution_id, fencing_token=r.fencing_token, accepted=True
    )


def _refused(
    group: list[tuple[int, worker_pb2.Result]], message: str
) -> list[tuple[int, worker_pb2.ResultAck]]:
    """UNAVAILABLE for each result of a group. Nothing is known written: the partition re-reads
    the run, hands it out again if etcd still holds it, and the worker's ledger answers with the
    result it recorded."""
    return [(n, _ack(r, False, grpc.StatusCode.UNAVAILABLE, message)) for n, r in group]


def _ack(
    r: worker_pb2.Result, accepted: bool, code: grpc.StatusCode, message: str
) -> worker_pb2.ResultAck:
    return worker_pb2.ResultAck(
        execution_id=r.execution_id,
        fencing_token=r.fencing_token,
        accepted=accepted,
        code=code.value[0],
        message=message,
    )

"""What happens to executions after their claim: firing, results, retries, redelivery.

:class:`ExecutionManager` is the node's :class:`~schedd.dispatch.ExecutionAuthority`: the
dispatcher hands it what workers report, and it decides, per owned partition, with fenced
compare-on-token writes. A result is accepted only with the execution's current token.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import grpc

from schedd._clock import Clock
from schedd._errors import FencedOut, SchedError
from schedd.history import History
from schedd.node._config import NodeConfig
from schedd.schedule import retry_backoff_ms
from schedd.store import DueEntry, Item, parse_execution_id, partition_of
from schedd.v1 import execution_pb2, job_pb2, worker_pb2

if TYPE_CHECKING:
    from schedd.dispatch import Dispatcher, InFlight
    from schedd.node._partition import PartitionRunner

log = logging.getLogger(__name__)

_FAILED = (worker_pb2.OUTCOME_FAILED, worker_pb2.OUTCOME_TIMED_OUT)
_ENDED = frozenset({worker_pb2.OUTCOME_SUCCEEDED, worker_pb2.OUTCOME_FAILED_PERMANENT, *_FAILED})
_NOT_OWNED = "this node does not own the partition"


@dataclass
class Live:
    """An execution this node holds: claimed, maybe dispatched, not finished."""

    ex: execution_pb2.Execution
    timer: Any = None
    dispatched: bool = False
    cancelling: bool = False
    buffered: bool = False
    # Fired ahead of its instant once and no worker could hold it: fire it at the instant.
    hold_refused: bool = False
    # Built when the claim lands (seconds before the fire), so firing only hands it over.
    message: worker_pb2.Dispatch | None = None


class Outcomes(Protocol):
    def prepare(self, runner: PartitionRunner, live: Live) -> int: ...
    async def fire(self, runner: PartitionRunner, lives: list[Live]) -> None: ...
    def cancel_live(self, runner: PartitionRunner, live: Live, reason: str) -> None: ...
    def recorded(self, executions: Sequence[execution_pb2.Execution]) -> None: ...
    def partition_lost(self, partition: int, reason: str) -> None: ...


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


class ExecutionManager:
    """Fires claimed executions and applies what workers report."""

    def __init__(
        self,
        config: NodeConfig,
        clock: Clock,
        history: History,
        *,
        on_partition_lost: Callable[[int, str], None],
        rng: random.Random | None = None,
    ) -> None:
        self.config = config
        self.clock = clock
        self.history = history
        self.runners: dict[int, PartitionRunner] = {}
        self.dispatcher: Dispatcher | None = None
        self._on_partition_lost = on_partition_lost
        self.rng = rng or random.Random()
        # job id -> its dispatched execution id, or a set of them when more than one runs
        # (a str for the common single one: no container allocated per fire).
        self.running: dict[str, str | set[str]] = {}
        self.buffered: dict[str, Live] = {}  # job id -> the one fire waiting (BUFFER_ONE)
        self._partition_of: dict[str, int] = {}  # job id -> partition (a SHA-1 each, else)
        self._slices = FireSlices(config.fire_slice)

    def not_running(self, job_id: str, execution_id: str) -> None:
        """Forgets a dispatched execution of a job (and the job, when it has none left)."""
        ids = self.running.get(job_id)
        if ids is None:
            return
        if isinstance(ids, str):
            if ids == execution_id:
                del self.running[job_id]
            return
        ids.discard(execution_id)
        if len(ids) == 1:
            self.running[job_id] = next(iter(ids))
        elif not ids:
            del self.running[job_id]

    def _mark_running(self, job_id: str, execution_id: str) -> None:
        ids = self.running.get(job_id)
        if ids is None or ids == execution_id:
            self.running[job_id] = execution_id
        elif isinstance(ids, str):
            self.running[job_id] = {ids, execution_id}
        else:
            ids.add(execution_id)

    def running_ids(self, job_id: str) -> list[str]:
        """The dispatched, unfinished executions of a job."""
        ids = self.running.get(job_id)
        if ids is None:
            return []
        return [ids] if isinstance(ids, str) else list(ids)

    def _runner_of(self, execution_id: str) -> PartitionRunner | None:
        job_id, _ = parse_execution_id(execution_id)
        p = self._partition_of.get(job_id)
        if p is None:
            if len(self._partition_of) >= 1 << 17:
                self._partition_of.clear()
            p = self._partition_of[job_id] = partition_of(job_id, self.config.partitions)
        return self.runners.get(p)

    # -- Outcomes (called by partition runners) -------------------------------------------------

    def prepare(self, runner: PartitionRunner, live: Live) -> int:
        """Builds the dispatch message ahead of the fire (its deadline counts from due_ms).

        Returns:
            When its timer should fire: ``hold_ms`` before the instant for a job whose overlap
            policy cannot depend on the instant (ALLOW), so a worker may hold it; else the
            instant.
        """
        cached = runner.jobs.get(live.ex.job_id)
        job = cached.job if cached else None
        live.message = self._dispatch_message(live.ex, job, live.ex.due_ms)
        hold = self.config.hold_ms
        if hold > 0 and job is not None and job.overlap in _HOLDABLE:
            return live.ex.due_ms - hold
        return live.ex.due_ms

    async def fire(self, runner: PartitionRunner, lives: list[Live]) -> None:
        """The wheel fired these: apply overlap policies, dispatch the rest in one batch.

        When other partitions already fired a slice's worth on this loop pass (a burst
        instant: every partition's wheel is due on the same pass), this one waits for the
        next pass, so the stream writes their fires woke go first and the first handlers
        start while the rest of the burst is still being fired. More than a slice from one
        partition is fired a slice at a time the same way.
        """
        size = self._slices.size
        if size and len(lives) > size:  # one partition's share of a burst: a slice per pass
            for i in range(0, len(lives), size):
                await self._fire(runner, lives[i : i + size], stale=i > 0)
            return
        await self._fire(runner, lives)

    async def _take_slice(
        self, runner: PartitionRunner, lives: list[Live], stale: bool
    ) -> list[Live]:
        while self._slices.full():
            await self._slices.next_pass()
            stale = True
        if stale:  # the loop ran since the wheel fired them: keep only those still held
            held = runner.live
            lives = [lv for lv in lives if held.get(lv.ex.id) is lv and not lv.dispatched]
        self._slices.used(len(lives))
        return lives

    async def _fire(self, runner: PartitionRunner, lives: list[Live], stale: bool = False) -> None:
        lives = await self._take_slice(runner, lives, stale)
        now = self.clock.now_ms()
        send: list[Live] = []
        skipped: list[Live] = []
        running = self.running
        for live in lives:
            job_id = live.ex.job_id
            if job_id not in running:  # nothing of this job runs: every policy sends it
                send.append(live)
                continue
            eid = live.ex.id
            busy = [e for e in self.running_ids(job_id) if e != eid]
            cached = runner.jobs.get(job_id)
            policy = cached.job.overlap if cached else job_pb2.OVERLAP_ALLOW
            if not busy or policy in (job_pb2.OVERLAP_ALLOW, job_pb2.OVERLAP_POLICY_UNSPECIFIED):
                send.append(live)
            elif policy == job_pb2.OVERLAP_FORBID:
                skipped.append(live)
            elif policy == job_pb2.OVERLAP_BUFFER_ONE:
                if live.ex.job_id in self.buffered:
                    skipped.append(live)
                else:
                    live.buffered = True
                    self.buffered[live.ex.job_id] = live
            else:  # REPLACE
                for eid in busy:
                    old = runner.live.get(eid)
                    if old is not None:
                        old.cancelling = True
                        self._cancel_dispatch(old, "replaced by a newer fire")
                send.append(live)
        if skipped:
            await self._skip(runner, skipped, now)
        self._dispatch(runner, send, now)

    def _dispatch(self, runner: PartitionRunner, lives: Sequence[Live], now: int) -> None:
        if not lives or self.dispatcher is None:
            return
        out = []
        early: list[Live] = []
        running = self.running
        dispatched = execution_pb2.EXECUTION_DISPATCHED
        for live in lives:
            ex = live.ex
            if ex.due_ms > now and not live.hold_refused:
                early.append(live)
                continue
            self._mark_dispatched(live, now)
            job_id = ex.job_id
            if job_id in running:
                self._mark_running(job_id, ex.id)
            else:
                running[job_id] = ex.id
            msg = live.message
            if msg is None or msg.fencing_token != ex.fencing_token:
                cached = runner.jobs.get(job_id)
                msg = self._dispatch_message(ex, cached.job if cached else None, now)
            live.message = None
            out.append(msg)
            ex.state = dispatched
        if out:
            self.dispatcher.submit(out)
        if early:
            self._hold(runner, early, now)

    def _mark_dispatched(self, live: Live, now: int) -> None:
        live.dispatched = True
        if live.buffered:
            live.buffered = False
            self.buffered.pop(live.ex.job_id, None)
        live.ex.dispatched_ms = now

    def _hold(self, runner: PartitionRunner, lives: list[Live], now: int) -> None:
        """Fired ahead of their instant: a worker that can hold them gets them now; the rest
        are armed again for the instant itself."""
        assert self.dispatcher is not None
        msgs = []
        for live in lives:
            ex = live.ex
            msg = live.message
            if msg is None or msg.fencing_token != ex.fencing_token:
                cached = runner.jobs.get(ex.job_id)
                msg = live.message = self._dispatch_message(
                    ex, cached.job if cached else None, ex.due_ms
                )
            msg.start_at_ms = ex.due_ms
            msgs.append(msg)
        refused = self.dispatcher.hold(msgs)
        back = {d.execution_id for d in refused}
        running = self.running
        for live in lives:
            ex = live.ex
            if ex.id in back:
                live.hold_refused = True
                if live.message is not None:
                    live.message.start_at_ms = 0
                live.timer = runner.driver.add(ex.due_ms, ex.id)
                continue
            self._mark_dispatched(live, now)
            live.message = None
            ex.state = execution_pb2.EXECUTION_DISPATCHED
            if ex.job_id in running:
                self._mark_running(ex.job_id, ex.id)
            else:
                running[ex.job_id] = ex.id

    def _dispatch_message(
        self, ex: execution_pb2.Execution, job: job_pb2.Job | None, now: int
    ) -> worker_pb2.Dispatch:
        timeout = (job.timeout_ms if job else 0) or self.config.default_timeout_ms
        d = worker_pb2.Dispatch(
            execution_id=ex.id,
            job_id=ex.job_id,
            tenant=ex.tenant,
            scheduled_ms=ex.scheduled_ms,
            attempt=ex.attempt,
            fencing_token=ex.fencing_token,
            queue=ex.queue or "default",
            handler=ex.handler,
            payload=ex.payload_override
            if ex.has_payload_override
            else (job.payload if job else b""),
            deadline_ms=now + timeout,
            checkpoint=ex.checkpoint,
            has_checkpoint=bool(ex.checkpoint),
            max_attempts=ex.max_attempts,
        )
        if job is not None and job.WhichOneof("target") in ("http", "shell"):
            target = job_pb2.Job()
            if job.HasField("http"):
                target.http.CopyFrom(job.http)
            else:
                target.shell.CopyFrom(job.shell)
            d.target = target.SerializeToString()
        return d

    async def _skip(self, runner: PartitionRunner, lives: Sequence[Live], now: int) -> None:
        items, finals = [], []
        for live in lives:
            runner.live.pop(live.ex.id, None)
            final = _copy(live.ex)
            final.state = execution_pb2.EXECUTION_SKIPPED
            final.reason = "overlap policy: a previous run of this job is still running"
            final.finished_ms = now
            items.append(runner.store.finish_run(live.ex))
            finals.append(final)
        try:
            ok, _ = await runner.store.apply(items)
        except FencedOut as exc:
            runner._fenced_out(exc)
            return
        done = [f for f, good in zip(finals, ok, strict=True) if good]
        self.history.record(done)

    def cancel_live(self, runner: PartitionRunner, live: Live, reason: str) -> None:
        if live.timer is not None:
            runner.driver.cancel(live.timer)
        if live.dispatched:
            self._cancel_dispatch(live, reason)
        self.not_running(live.ex.job_id, live.ex.id)

    def _cancel_dispatch(self, live: Live, reason: str) -> None:
        if self.dispatcher is not None:
            self.dispatcher.cancel(live.ex.id, live.ex.fencing_token, reason)

    def recorded(self, executions: Sequence[execution_pb2.Execution]) -> None:
        for ex in executions:
            log.info(
                "execution %s %s: %s", ex.id, execution_pb2.ExecutionState.Name(ex.state), ex.reason
            )

    def partition_lost(self, partition: int, reason: str) -> None:
        self._on_partition_lost(partition, reason)

    # -- ExecutionAuthority (called by the dispatcher) ----------------------------------------

    async def on_started(self, worker_id: str, started: list[worker_pb2.Started]) -> None:
        for s in started:
            runner = self._runner_of(s.execution_id)
            live = runner.live.get(s.execution_id) if runner else None
            if live is not None and live.ex.fencing_token == s.fencing_token:
                live.ex.state = execution_pb2.EXECUTION_RUNNING
                live.ex.started_ms = s.started_ms
                live.ex.worker_id = worker_id

    async def on_heartbeats(
        self, worker_id: str, heartbeats: list[worker_pb2.Heartbeat]
    ) -> list[str]:
        stale: list[str] = []
        for hb in heartbeats:
            runner = self._runner_of(hb.execution_id)
            live = runner.live.get(hb.execution_id) if runner else None
            if live is None or live.ex.fencing_token != hb.fencing_token:
                stale.append(hb.execution_id)
            elif hb.has_checkpoint:
                live.ex.checkpoint = hb.checkpoint
        return stale

    def on_reported(self, results: list[worker_pb2.Result]) -> None:
        """An attempt that ended (not one a worker gave back, CANCELLED: it is handed out
        again) stops counting as running for the overlap policies now, not when its result is
        settled, which may be deferred for a dispatch backlog."""
        for r in results:
            if r.outcome in _ENDED:
                job_id, _ = parse_execution_id(r.execution_id)
                self.not_running(job_id, r.execution_id)

    async def on_results(
        self, worker_id: str, results: list[worker_pb2.Result]
    ) -> list[worker_pb2.ResultAck]:
        acks: dict[int, worker_pb2.ResultAck] = {}
        groups: dict[int, tuple[PartitionRunner, list[tuple[int, worker_pb2.Result]]]] = {}
        for n, r in enumerate(results):
            runner = self._runner_of(r.execution_id)
            if runner is None:
                acks[n] = _ack(r, False, grpc.StatusCode.UNAVAILABLE, _NOT_OWNED)
                continue
            groups.setdefault(runner.partition, (runner, []))[1].append((n, r))
        # Partitions settle concurrently: each has its own lock, fence and transactions, and a
        # round would otherwise cost one etcd round trip per partition in turn.
        settled = await asyncio.gather(
            *(self._settle_group(runner, group, worker_id) for runner, group in groups.values())
        )
        for part in settled:
            for n, ack in part:
                acks[n] = ack
        return [acks[n] for n in range(len(results))]

    async def _settle_group(
        self,
        runner: PartitionRunner,
        group: list[tuple[int, worker_pb2.Result]],
        worker_id: str,
    ) -> list[tuple[int, worker_pb2.ResultAck]]:
        try:
            async with runner._lock:
                # The partition may have moved while this waited for its lock.
                if self.runners.get(runner.partition) is not runner:
                    return _refused(group, _NOT_OWNED)
                return await self._apply_results(runner, group, worker_id)
        except Exception:
            log.exception("partition %d: settling %d results failed", runner.partition, len(group))
            return _refused(group, "the node could not settle the result; it will be redelivered")

    async def _apply_results(
        self,
        runner: PartitionRunner,
        group: list[tuple[int, worker_pb2.Result]],
        worker_id: str,
    ) -> list[tuple[int, worker_pb2.ResultAck]]:
        now = self.clock.now_ms()
        out: list[tuple[int, worker_pb2.ResultAck]] = []
        decisions: list[tuple[int, _Decision]] = []
        for n, r in group:
            live = runner.live.get(r.execution_id)
            if live is None or live.ex.fencing_token != r.fencing_token:
                current = live.ex.fencing_token if live else None
                msg = f"token {r.fencing_token} is stale (current: {current or 'none'})"
                out.append((n, _ack(r, False, grpc.StatusCode.FAILED_PRECONDITION, msg)))
                continue
            if not live.ex.worker_id:  # no Started came: it was folded into this Result
                live.ex.worker_id = worker_id
            decisions.append((n, self._decide(runner, live, r, now)))
        if not decisions:
            return out
        try:
            ok, revs = await runner.store.apply_each([d.item for _, d in decisions])
        except (FencedOut, SchedError) as exc:
            if isinstance(exc, FencedOut):
                runner._fenced_out(exc)
            return out + [
                (n, _ack(d.result, False, grpc.StatusCode.UNAVAILABLE, str(exc)))
                for n, d in decisions
            ]
        finished: list[execution_pb2.Execution] = []
        resend: list[Live] = []
        for (n, d), good, rev in zip(decisions, ok, revs, strict=True):
            if not good:
                runner.live.pop(d.live.ex.id, None)
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
            self._after(runner, d, rev, finished, resend)
        self.history.record(finished)
        self._dispatch(runner, resend, now)
        return out

    def _decide(
        self, runner: PartitionRunner, live: Live, r: worker_pb2.Result, now: int
    ) -> _Decision:
        if r.outcome == worker_pb2.OUTCOME_SUCCEEDED:
            end = execution_pb2.EXECUTION_SUCCEEDED
            return _Decision(live, r, runner.store.finish_run(live.ex), end_state=end)
        if r.outcome == worker_pb2.OUTCOME_CANCELLED and live.cancelling:
            end = execution_pb2.EXECUTION_CANCELLED
            return _Decision(live, r, runner.store.finish_run(live.ex), end_state=end)
        ex = _copy(live.ex)
        _finish(ex, r, now)
        if r.outcome == worker_pb2.OUTCOME_CANCELLED:
            # The worker shut down before finishing it: hand it out again, same attempt.
            ex.state = execution_pb2.EXECUTION_PENDING
            ex.worker_id = ""
            return _Decision(live, r, runner.store.rewrite_run(ex), redeliver=True)
        max_attempts = ex.max_attempts or 3
        if r.outcome in _FAILED and ex.attempt < max_attempts:
            return self._retry(runner, live, r, ex, now)
        ex.state = execution_pb2.EXECUTION_DEAD
        ex.reason = f"attempt {ex.attempt} of {max_attempts} failed"
        return _Decision(live, r, runner.store.finish_run(live.ex, dead_record=ex), final=ex)

    def _retry(
        self,
        runner: PartitionRunner,
        live: Live,
        r: worker_pb2.Result,
        ex: execution_pb2.Execution,
        now: int,
    ) -> _Decision:
        cached = runner.jobs.get(ex.job_id)
        retry = cached.job.retry if cached else job_pb2.RetryPolicy()
        delay = retry_backoff_ms(
            ex.attempt,
            initial_ms=retry.initial_backoff_ms or 1000,
            max_ms=retry.max_backoff_ms or 300_000,
            multiplier=retry.multiplier or 2.0,
            rng=self.rng,
        )
        ex.state = execution_pb2.EXECUTION_RETRY_WAIT
        ex.attempt += 1
        ex.due_ms = now + max(1, delay)
        ex.worker_id = ""
        ex.fencing_token = live.ex.fencing_token
        item = runner.store.rewrite_run(ex, add_due_ms=ex.due_ms)
        return _Decision(live, r, item, retry_due_ms=ex.due_ms)

    def _after(
        self,
        runner: PartitionRunner,
        d: _Decision,
        rev: int,
        finished: list[execution_pb2.Execution],
        resend: list[Live],
    ) -> None:
        eid, job_id = d.live.ex.id, d.live.ex.job_id
        self.not_running(job_id, eid)
        if d.redeliver:
            d.live.ex.fencing_token = rev
            d.live.ex.worker_id = ""
            resend.append(d.live)
            return
        runner.live.pop(eid, None)
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
        if d.retry_due_ms and d.retry_due_ms <= runner.window_end:
            entry = DueEntry(
                runner.partition, d.retry_due_ms, job_id, "r", d.live.ex.scheduled_ms, rev
            )
            runner.due[(entry.due_ms, job_id)] = entry
            runner._wake.set()
        waiting = self.buffered.get(job_id)
        if waiting is not None and job_id not in self.running and waiting.ex.id in runner.live:
            resend.append(waiting)

    async def on_lost(self, lost: list[InFlight], reason: str) -> None:
        """A worker vanished or let a lease run out: redeliver each with a new, larger token."""
        by_runner: dict[int, tuple[PartitionRunner, list[Live]]] = {}
        for inflight in lost:
            d = inflight.dispatch
            runner = self._runner_of(d.execution_id)
            live = runner.live.get(d.execution_id) if runner else None
            if runner is None or live is None or live.ex.fencing_token != d.fencing_token:
                continue
            by_runner.setdefault(runner.partition, (runner, []))[1].append(live)
        for runner, lives in by_runner.values():
            async with runner._lock:
                # A partition that moved meanwhile is its new owner's to redeliver (takeover).
                if self.runners.get(runner.partition) is runner:
                    await self._redeliver(runner, lives, reason)

    async def _redeliver(self, runner: PartitionRunner, lives: list[Live], reason: str) -> None:
        items = []
        for live in lives:
            ex = _copy(live.ex)
            ex.state = execution_pb2.EXECUTION_PENDING
            ex.worker_id = ""
            items.append(runner.store.rewrite_run(ex))
        try:
            ok, revs = await runner.store.apply_each(items)
        except FencedOut as exc:
            runner._fenced_out(exc)
            return
        resend = []
        for live, good, rev in zip(lives, ok, revs, strict=True):
            self.not_running(live.ex.job_id, live.ex.id)
            if good:
                live.ex.fencing_token = rev
                live.ex.worker_id = ""
                resend.append(live)
            else:
                runner.live.pop(live.ex.id, None)
        log.info(
            "partition %d: redelivering %d executions (%s)", runner.partition, len(resend), reason
        )
        self._dispatch(runner, resend, self.clock.now_ms())


#: Overlap policies whose decision does not depend on what runs at the instant: an execution
#: of such a job may be sent ahead to a worker that holds it.
_HOLDABLE = frozenset({job_pb2.OVERLAP_ALLOW, job_pb2.OVERLAP_POLICY_UNSPECIFIED})


def _finish(ex: execution_pb2.Execution, r: worker_pb2.Result, now: int) -> None:
    """What every ended or redelivered attempt takes from the worker's result."""
    ex.finished_ms = r.finished_ms or now
    ex.started_ms = r.started_ms or ex.started_ms
    ex.error = r.error


class FireSlices:
    """Counts fires per event-loop pass; past ``size`` in one pass, further fires wait a pass.

    The count starts again at the first callback of each pass that had fires (a ``call_soon``
    made when the pass's first fire was counted), so a lone fire never waits.
    """

    def __init__(self, size: int) -> None:
        self.size = size
        self._count = 0
        self._reset_queued = False

    def full(self) -> bool:
        return self.size > 0 and self._count >= self.size

    def used(self, n: int) -> None:
        if not self._reset_queued and n:
            self._reset_queued = True
            asyncio.get_running_loop().call_soon(self._reset)
        self._count += n

    def _reset(self) -> None:
        self._count = 0
        self._reset_queued = False

    @staticmethod
    async def next_pass() -> None:
        await asyncio.sleep(0)


def _copy(ex: execution_pb2.Execution) -> execution_pb2.Execution:
    out = execution_pb2.Execution()
    out.CopyFrom(ex)
    return out


def _accepted(r: worker_pb2.Result) -> worker_pb2.ResultAck:
    """``_ack(r, True, OK, "")``: code and message are their defaults."""
    return worker_pb2.ResultAck(
        execution_id=r.execution_id, fencing_token=r.fencing_token, accepted=True
    )


def _refused(
    group: list[tuple[int, worker_pb2.Result]], message: str
) -> list[tuple[int, worker_pb2.ResultAck]]:
    """UNAVAILABLE for each result of a group. Nothing was written: the run stays in etcd, its
    owner redelivers it, and the worker's ledger answers with the result it recorded."""
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

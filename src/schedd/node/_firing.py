"""Firing: what happens to a claimed execution when its timer expires.

The :class:`Firer` is every partition's :class:`~._live.Firing`. It builds the dispatch message
when the claim lands (so the fire only hands it over), applies the job's overlap policy at the
instant (``allow``, ``forbid``, ``buffer_one``, ``replace``) against the :class:`RunningIndex`
it owns, sends ALLOW jobs ahead of their instant to workers that hold them, and hands the rest
to the dispatcher, a fire slice per event-loop pass. Skips are the only writes it makes.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from schedd._clock import Clock
from schedd._errors import FencedOut, SchedError
from schedd.history import History
from schedd.node._config import NodeConfig
from schedd.node._live import Live, RunningIndex
from schedd.node._sealed import refusal, split_sealed
from schedd.node._tenants import Admitted, TenantLimiter
from schedd.obs import MetricsRecorder
from schedd.store import Item, Sealer
from schedd.v1 import execution_pb2, job_pb2, worker_pb2

if TYPE_CHECKING:
    from schedd.dispatch import Dispatcher
    from schedd.node._partition import Partition

log = logging.getLogger(__name__)

#: Overlap policies whose decision does not depend on what runs at the instant: an execution
#: of such a job may be sent ahead to a worker that holds it.
_HOLDABLE = frozenset({job_pb2.OVERLAP_ALLOW, job_pb2.OVERLAP_POLICY_UNSPECIFIED})
_SKIPPED_REASON = "overlap policy: a previous run of this job is still running"
#: How much later a fire that came while the node was fenced (see ``Firer.may_act``) retries.
_FENCED_RETRY_MS = 100
# Executions due this soon after the hold horizon may have been sent out by a failed owner.
_PROBE_MARGIN_MS = 1_000


def _always() -> bool:
    return True


class Firer:
    """Fires claimed executions: overlap policies, holding ahead, dispatch, fire slices.

    Attributes:
        running: the dispatched, unfinished executions per job (the settler ends them).
        dispatcher: where executions go; attached by the node once it exists.
        may_act: whether the node may fire now; the node ties it to its session's
            self-fencing. While it says no, fires wait (re-armed shortly after): a node that
            may have lost its lease must not hand out what a new owner hands out again.
    """

    def __init__(self, config: NodeConfig, clock: Clock, history: History) -> None:
        self.config = config
        self.clock = clock
        self.history = history
        self.running = RunningIndex()
        self.dispatcher: Dispatcher | None = None
        self.may_act: Callable[[], bool] = _always
        self._slices = FireSlices(config.fire_slice)
        #: Per-tenant rate and running limits (the node keeps their limits and share current).
        self.tenants: TenantLimiter[tuple[Partition, Live]] = TenantLimiter()
        self.running.on_discard = self._ended
        self._drain_queued = False
        #: Where fires are reported (metrics); None: nowhere, at no cost.
        self.recorder: MetricsRecorder | None = None
        #: The partitions' sealer, attached by the node: while it counts values it could not
        #: decrypt, what would carry one is refused instead of dispatched (None: never).
        self.sealer: Sealer | None = None

    def dispatch_backlogged(self) -> bool:
        """The dispatch queue holds ``max_dispatch_backlog`` executions or more: partitions
        claim nothing until it drains (see NodeConfig)."""
        bound = self.config.max_dispatch_backlog
        return (
            bool(bound)
            and self.dispatcher is not None
            and (self.dispatcher.pending_count() >= bound)
        )

    def _lead(self, partition: Partition, live: Live) -> int:
        """How long before its instant the timer of ``live`` fires (hold_ms when a worker
        may hold it, else 0)."""
        hold = self.config.hold_ms
        if hold <= 0:
            return 0
        cached = partition.jobs.get(live.ex.job_id)
        return hold if cached is not None and cached.job.overlap in _HOLDABLE else 0

    def prepare(self, partition: Partition, live: Live) -> int:
        """Builds the dispatch message ahead of the fire (its deadline counts from due_ms).

        Returns:
            When its timer should fire: ``hold_ms`` before the instant for a job whose overlap
            policy cannot depend on the instant (ALLOW), so a worker may hold it; else the
            instant.
        """
        cached = partition.jobs.get(live.ex.job_id)
        job = cached.job if cached else None
        live.message = dispatch_message(live.ex, job, live.ex.due_ms, self.config)
        hold = self.config.hold_ms
        if hold > 0 and job is not None and job.overlap in _HOLDABLE:
            return live.ex.due_ms - hold
        return live.ex.due_ms

    def adopt(self, partition: Partition, runs: list[execution_pb2.Execution]) -> None:
        """Live executions taken over under a new token. Those due within the hold horizon
        may be out on a worker already (sent, held, running or run by the failed owner):
        the workers are probed first (see :mod:`schedd.dispatch._probes`), so the one that
        has it keeps it under the new token instead of another running it again. The rest,
        and those no worker has, are armed for their instant."""
        now = self.clock.now_ms()
        horizon = now + self.config.hold_ms + _PROBE_MARGIN_MS
        probe: list[Live] = []
        sealed = self._sealed_in_memory()
        for ex in runs:
            live = partition.live[ex.id] = Live(ex)
            if sealed and self._split_sealed(partition, [live])[1]:
                partition.arm_at(live, now)  # refused when it fires: never sent, not even probed
                continue
            fire_ms = self.prepare(partition, live)
            if self.dispatcher is not None and ex.due_ms <= horizon:
                probe.append(live)
            else:
                partition.arm_at(live, max(fire_ms, now))
        if probe:
            self._probe(partition, probe)

    def _probe(self, partition: Partition, lives: list[Live]) -> None:
        assert self.dispatcher is not None
        by_id = {live.ex.id: live for live in lives}

        def answer(execution_id: str, taken: bool) -> None:
            live = by_id.pop(execution_id, None)
            if live is None or partition.live.get(execution_id) is not live:
                return  # it left the partition meanwhile
            now = self.clock.now_ms()
            log.debug(
                "%s: probe %s (token %d)",
                execution_id,
                "taken" if taken else "not taken",
                live.ex.fencing_token,
            )
            if not taken:
                partition.arm_at(live, max(self.prepare(partition, live), now))
                return
            self._mark_dispatched(live, now)
            live.message = None
            live.ex.state = execution_pb2.EXECUTION_DISPATCHED
            self.running.add(live.ex.job_id, live.ex.id)

        msgs = []
        for live in lives:
            assert live.message is not None  # built by prepare
            msgs.append(live.message)
        self.dispatcher.probe(msgs, answer)

    async def fire(self, partition: Partition, lives: list[Live]) -> None:
        """The wheel fired these: apply overlap policies, dispatch the rest in one batch.

        When other partitions already fired a slice's worth on this loop pass (a burst
        instant: every partition's wheel is due on the same pass), this one waits for the
        next pass, so the stream writes their fires woke go first and the first handlers
        start while the rest of the burst is still being fired. More than a slice from one
        partition is fired a slice at a time the same way.
        """
        if not self.may_act():
            later = self.clock.now_ms() + _FENCED_RETRY_MS
            for live in lives:
                partition.arm_at(live, later)
            return
        size = self._slices.size
        if size and len(lives) > size:  # one partition's share of a burst: a slice per pass
            for i in range(0, len(lives), size):
                await self._fire(partition, lives[i : i + size], stale=i > 0)
            return
        await self._fire(partition, lives)

    def cancel(self, partition: Partition, live: Live, reason: str) -> None:
        """The execution left its partition: disarm it, cancel it on its worker, forget it."""
        partition.disarm(live)
        if live.dispatched:
            self._cancel_dispatch(live, reason)
        self.running.discard(live.ex.job_id, live.ex.id)

    async def _take_slice(self, partition: Partition, lives: list[Live], stale: bool) -> list[Live]:
        while self._slices.full():
            await self._slices.next_pass()
            stale = True
        if stale:  # the loop ran since the wheel fired them: keep only those still held
            held = partition.live
            lives = [lv for lv in lives if held.get(lv.ex.id) is lv and not lv.dispatched]
        self._slices.used(len(lives))
        return lives

    async def _fire(self, partition: Partition, lives: list[Live], stale: bool = False) -> None:
        lives = await self._take_slice(partition, lives, stale)
        now = self.clock.now_ms()
        if self._sealed_in_memory():
            lives, refused = self._split_sealed(partition, lives)
            if refused:
                await self._refuse(partition, refused, now)
        if self.tenants:
            lives = self._gate(partition, lives, now)
        send: list[Live] = []
        skipped: list[Live] = []
        running = self.running.by_job
        for live in lives:
            if live.ex.job_id not in running:  # nothing of this job runs: every policy sends it
                send.append(live)
            else:
                self._apply_overlap(partition, live, send, skipped)
        if skipped:
            await self._skip(partition, skipped, now)
        self.dispatch(partition, send, now)

    def _gate(self, partition: Partition, lives: list[Live], now: int) -> list[Live]:
        """Applies the tenants' limits: returns the fires that may go now; the rest are armed
        for their slots or wait for a running slot (see :mod:`._tenants`)."""
        tenants = self.tenants
        out: list[Live] = []
        for live in lives:
            ex = live.ex
            if live.gate_due == ex.due_ms or not tenants.limited(ex.tenant):
                out.append(live)  # admitted earlier and fired again at its slot, or unlimited
                continue
            arrival = max(ex.due_ms, now)
            slot = tenants.admit(ex.tenant, ex.id, arrival, now, (partition, live))
            if slot is not None:
                self._admitted(partition, live, slot, now, out)
        if self.recorder is not None and len(out) < len(lives):
            self.recorder.throttled(len(lives) - len(out))
        return out

    def _admitted(
        self, partition: Partition, live: Live, slot: int, now: int, out: list[Live]
    ) -> None:
        live.gate_due, live.slot_ms = live.ex.due_ms, slot
        fire_at = slot - self._lead(partition, live)
        if fire_at > now:
            partition.arm_at(live, fire_at)
        else:
            out.append(live)

    def _ended(self, execution_id: str) -> None:
        """An execution ended or left: a tenant at its running cap may admit the next."""
        if self.tenants.release(execution_id) and not self._drain_queued:
            self._drain_queued = True
            asyncio.get_running_loop().call_soon(self._drain)

    def _drain(self) -> None:
        self._drain_queued = False
        self.let_go(self.tenants.drain(self.clock.now_ms()))

    def let_go(self, admitted: list[Admitted[tuple[Partition, Live]]]) -> None:
        """Fires that waited for a running slot: armed for their slots (the wheel fires them
        through the overlap policy like any other)."""
        now = self.clock.now_ms()
        for a in admitted:
            partition, live = a.item
            if partition.live.get(live.ex.id) is not live or live.dispatched:
                continue
            live.gate_due, live.slot_ms = live.ex.due_ms, a.slot_ms
            partition.arm_at(live, max(a.slot_ms - self._lead(partition, live), now))

    def _apply_overlap(
        self, partition: Partition, live: Live, send: list[Live], skipped: list[Live]
    ) -> None:
        """The job has an execution out: its overlap policy decides what this fire does."""
        job_id, eid = live.ex.job_id, live.ex.id
        busy = [e for e in self.running.ids(job_id) if e != eid]
        cached = partition.jobs.get(job_id)
        policy = cached.job.overlap if cached else job_pb2.OVERLAP_ALLOW
        if not busy or policy in (job_pb2.OVERLAP_ALLOW, job_pb2.OVERLAP_POLICY_UNSPECIFIED):
            send.append(live)
        elif policy == job_pb2.OVERLAP_FORBID:
            skipped.append(live)
        elif policy == job_pb2.OVERLAP_BUFFER_ONE:
            if job_id in self.running.buffered:
                skipped.append(live)
            else:
                live.buffered = True
                self.running.buffered[job_id] = live
        else:  # REPLACE
            for other in busy:
                old = partition.live.get(other)
                if old is not None:
                    old.cancelling = True
                    self._cancel_dispatch(old, "replaced by a newer fire")
            send.append(live)

    def _message_now(self, partition: Partition, live: Live, now: int) -> worker_pb2.Dispatch:
        """The Dispatch to hand ``live`` out with at ``now``: the one built at its claim, or a
        new one when that was built for an earlier instant or token."""
        ex, msg = live.ex, live.message
        # A throttled one's message was built for an earlier instant: its deadline counts
        # from now.
        if msg is None or msg.fencing_token != ex.fencing_token or ex.throttled_ms:
            cached = partition.jobs.get(ex.job_id)
            return dispatch_message(ex, cached.job if cached else None, now, self.config)
        if now > ex.due_ms and msg.deadline_ms:
            # Built at the claim for the due instant and fired late (a backlog, a node back
            # from downtime, a takeover): the attempt still gets its whole timeout, rather
            # than a deadline that passed before it could start.
            msg.deadline_ms += now - ex.due_ms
        return msg

    def dispatch(self, partition: Partition, lives: Sequence[Live], now: int) -> None:
        """Hands these out now (or holds those before their instant on a worker)."""
        if not lives or self.dispatcher is None:
            return
        if self._sealed_in_memory():
            lives, refused = self._split_sealed(partition, lives)
            for live, _ in refused:  # the wheel fires them at once, and _fire refuses them
                partition.arm_at(live, now)
        out = []
        early: list[Live] = []
        running, add = self.running.by_job, self.running.add
        dispatched = execution_pb2.EXECUTION_DISPATCHED
        delays: list[float] | None = [] if self.recorder is not None else None
        for live in lives:
            ex = live.ex
            if live.instant() > now and not live.hold_refused:
                early.append(live)
                continue
            self._mark_dispatched(live, now)
            job_id = ex.job_id
            if job_id in running:
                add(job_id, ex.id)
            else:
                running[job_id] = ex.id
            msg = self._message_now(partition, live, now)
            live.message = None
            instant = live.instant()
            msg.due_ms = instant
            out.append(msg)
            ex.state = dispatched
            if delays is not None:
                delays.append(now - instant)
        if out:
            self.dispatcher.submit(out)
            if delays:
                self.recorder.fired(delays)  # type: ignore[union-attr]
        if early:
            self._hold(partition, early, now)

    def _mark_dispatched(self, live: Live, now: int) -> None:
        live.dispatched = True
        if live.buffered:
            live.buffered = False
            self.running.buffered.pop(live.ex.job_id, None)
        ex = live.ex
        ex.dispatched_ms = now
        if self.tenants:
            self.tenants.running(ex.tenant, ex.id)
        if live.gate_due == ex.due_ms:
            ex.throttled_ms = max(0, live.slot_ms - ex.due_ms)
        elif ex.throttled_ms:  # an earlier attempt's
            ex.throttled_ms = 0

    def _hold(self, partition: Partition, lives: list[Live], now: int) -> None:
        """Fired ahead of their instant: a worker that can hold them gets them now; the rest
        are armed again for the instant itself."""
        assert self.dispatcher is not None
        msgs = []
        for live in lives:
            ex = live.ex
            msg = live.message
            instant = live.instant()
            if msg is None or msg.fencing_token != ex.fencing_token or instant != ex.due_ms:
                cached = partition.jobs.get(ex.job_id)
                job = cached.job if cached else None
                msg = live.message = dispatch_message(ex, job, instant, self.config)
            msg.start_at_ms = msg.due_ms = instant
            msgs.append(msg)
        refused = self.dispatcher.hold(msgs)
        back = {d.execution_id for d in refused}
        if self.recorder is not None and len(back) < len(lives):
            self.recorder.fired((), held=len(lives) - len(back))
        running, add = self.running.by_job, self.running.add
        for live in lives:
            ex = live.ex
            if ex.id in back:
                live.hold_refused = True
                if live.message is not None:
                    live.message.start_at_ms = 0
                partition.arm_at(live, live.instant())
                continue
            self._mark_dispatched(live, now)
            live.message = None
            ex.state = execution_pb2.EXECUTION_DISPATCHED
            if ex.job_id in running:
                add(ex.job_id, ex.id)
            else:
                running[ex.job_id] = ex.id

    async def _skip(self, partition: Partition, lives: Sequence[Live], now: int) -> None:
        """Records fires the overlap policy dropped as SKIPPED (their runs leave etcd)."""
        items, finals = [], []
        for live in lives:
            partition.live.pop(live.ex.id, None)
            self._ended(live.ex.id)
            final = execution_pb2.Execution()
            final.CopyFrom(live.ex)
            final.state = execution_pb2.EXECUTION_SKIPPED
            final.reason = _SKIPPED_REASON
            final.finished_ms = now
            items.append(partition.store.finish_run(live.ex))
            finals.append(final)
        await self._record_ended(partition, items, finals, "skips")

    async def _record_ended(
        self,
        partition: Partition,
        items: list[Item],
        finals: list[execution_pb2.Execution],
        what: str,
    ) -> list[execution_pb2.Execution]:
        """Writes the end of executions that already left memory, then their history; returns
        those written. They left memory: if a write failed and etcd still holds them, the
        partition adopts them again (doubt)."""
        try:
            applied = await partition.store.apply(items)
        except FencedOut as exc:
            partition.fenced_out(exc)
            return []
        except SchedError as exc:
            log.warning("partition %d: recording %s failed: %s", partition.partition, what, exc)
            partition.doubt(f.job_id for f in finals)
            return []
        done = [f for f, good in zip(finals, applied.ok, strict=True) if good]
        self.history.record(done)
        for n, why in applied.rejected.items():
            partition.refused(what, finals[n].job_id, finals[n].id, why)
        partition.doubt(
            f.job_id
            for n, (f, good) in enumerate(zip(finals, applied.ok, strict=True))
            if not good and n not in applied.rejected
        )
        return done

    def _sealed_in_memory(self) -> bool:
        """Whether a read left a value encrypted (it could not decrypt it): from then on,
        every dispatch is checked (see :meth:`_split_sealed`); until then, none needs to be."""
        return self.sealer is not None and self.sealer.failures > 0

    def _split_sealed(
        self, partition: Partition, lives: Sequence[Live]
    ) -> tuple[list[Live], list[tuple[Live, str]]]:
        assert self.sealer is not None
        return split_sealed(self.sealer, partition.jobs, lives)

    async def _refuse(
        self, partition: Partition, refused: Sequence[tuple[Live, str]], now: int
    ) -> None:
        """Ends executions a value of which does not decrypt here as dead letters, never
        sent to a worker (see :mod:`._sealed`)."""
        items, finals = [], []
        for live, problem in refused:
            partition.live.pop(live.ex.id, None)
            self._ended(live.ex.id)
            self.running.discard(live.ex.job_id, live.ex.id)
            dead = refusal(live.ex, problem, now)
            items.append(partition.store.finish_run(live.ex, dead_record=dead))
            finals.append(dead)
            log.error(
                "execution %s is a dead letter, not dispatched: %s", live.ex.id, problem,
                extra={**partition.log_fields, "job": live.ex.job_id, "execution": live.ex.id},
            )  # fmt: skip
        done = await self._record_ended(partition, items, finals, "refusals")
        if self.recorder is not None:
            for _ in done:
                self.recorder.dead_lettered()

    def _cancel_dispatch(self, live: Live, reason: str) -> None:
        if self.dispatcher is not None:
            self.dispatcher.cancel(live.ex.id, live.ex.fencing_token, reason)


def dispatch_message(
    ex: execution_pb2.Execution, job: job_pb2.Job | None, now: int, config: NodeConfig
) -> worker_pb2.Dispatch:
    """The Dispatch for one attempt; its deadline counts from ``now`` (the instant, if held)."""
    timeout = (job.timeout_ms if job else 0) or config.default_timeout_ms
    d = worker_pb2.Dispatch(
        execution_id=ex.id,
        job_id=ex.job_id,
        tenant=ex.tenant,
        scheduled_ms=ex.scheduled_ms,
        attempt=ex.attempt,
        fencing_token=ex.fencing_token,
        queue=ex.queue or "default",
        handler=ex.handler,
        payload=ex.payload_override if ex.has_payload_override else (job.payload if job else b""),
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

"""A partition's state and the primitives every path of it writes through.

:class:`PartitionCore` holds everything one owned partition keeps in memory: the window of
due entries, the cached jobs, the claimed executions (``live``), the running index the overlap
policies read, the timer wheel, the lock ordering its store writes, and the doubts and
refusals waiting to be re-read. The partition's other parts (claims, fires, results; see
:class:`~._partition.Partition`) build on it; nothing outside the partition writes this state.

Two primitives carry the rules every path shares:

- :meth:`PartitionCore.write` is the one fenced write: a lost fence stops the partition; a
  failed write (or one whose outcome is unknown) doubts what it carried, to be re-read from
  the store; an item the store refused on its own is re-read with backoff; an item whose
  compare failed (changed meanwhile) is re-read.
- :meth:`PartitionCore.send` hands executions out through the partition's :class:`Outbound`
  port (or holds them on a worker ahead of their instant), and keeps the running index.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from schedd._clock import Clock
from schedd._errors import FencedOut, SchedError
from schedd.history import History
from schedd.node._claims import ClaimPlanner
from schedd.node._config import NodeConfig
from schedd.node._fire_policy import FirePolicy, dispatch_message
from schedd.node._live import Doubts, Live, RunningIndex
from schedd.node._pacing import ClaimPacer
from schedd.node._ports import Outbound, PartitionEvents
from schedd.node._refusals import RefusedWrites
from schedd.node._window import DueWindow
from schedd.obs import MetricsRecorder, NoopRecorder
from schedd.store import Applied, DueEntry, Item, PartitionStore, StoredJob
from schedd.store.abc import Op
from schedd.timerwheel import TimerWheel, WheelDriver
from schedd.v1 import execution_pb2, worker_pb2

log = logging.getLogger(__name__)

#: What a write carries, per item: (job id, execution id or "" for a schedule fire's claim).
Carried = Sequence[tuple[str, str]]


@dataclass(slots=True)
class Written:
    """What :meth:`PartitionCore.write` wrote, by item index: ``revisions[n]`` is the revision
    item ``n`` was written at (the fencing token of what it wrote), 0 when it was not;
    ``rejected`` the items the store refused on their own, with its reason."""

    revisions: list[int]
    rejected: dict[int, str]


def carried_by(executions: Iterable[execution_pb2.Execution]) -> list[tuple[str, str]]:
    """What writes of these executions carry (see :data:`Carried`)."""
    return [(ex.job_id, ex.id) for ex in executions]


class PartitionCore:
    """The state of one owned partition and the primitives that write it.

    Args:
        store: the partition's store, fenced by the node's ownership of it.
        config: the node's settings.
        clock: the node's clock.
        history: where finished executions are recorded.
        policy: the node's fire policy (shared by its partitions).
        outbound: where executions go to workers (the node's dispatcher).
        events: what the partition tells its node (fence lost, loop crashed).
        recorder: where it reports (metrics); nowhere by default.
        rng: the jitter of retry backoffs.
    """

    def __init__(
        self,
        store: PartitionStore,
        config: NodeConfig,
        clock: Clock,
        history: History,
        policy: FirePolicy,
        outbound: Outbound,
        events: PartitionEvents,
        *,
        recorder: MetricsRecorder | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self.store = store
        self.partition = store.partition
        self.config = config
        #: ``extra=`` of this partition's log lines (its fields in ``--log-format json``).
        self.log_fields: dict[str, object] = {"node": config.node_id, "partition": self.partition}
        self.clock = clock
        self.history = history
        self.policy = policy
        self.outbound = outbound
        self.events = events
        self.recorder: MetricsRecorder = recorder or NoopRecorder()
        self.planner = ClaimPlanner(store, config.grace_ms, tell=self.told)
        self.window = DueWindow()
        self.jobs: dict[str, StoredJob] = {}
        self.live: dict[str, Live] = {}
        #: The dispatched, unfinished executions per job (the overlap policies read it).
        self.running = RunningIndex(on_discard=policy.released)
        self.wheel: TimerWheel[str] = TimerWheel(tick_ms=config.tick_ms, start_ms=clock.now_ms())
        self.driver: WheelDriver[str] = WheelDriver(self.wheel, clock, self._on_timers)
        self._wake = asyncio.Event()
        #: Held by every sequence of store writes of this partition (claims, results, ...).
        self.lock = asyncio.Lock()
        self.stopped = asyncio.Event()
        self.pacer = ClaimPacer(config)
        self._doubts = Doubts()  # re-read by the claim loop, see doubt()
        self.refusals = RefusedWrites()  # see refused()
        self._stopping = False
        self._tasks: list[asyncio.Task[None]] = []  # the claim loop and the wheel's driver
        self._fire_conflicts: set[str] = set()  # jobs whose last schedule-fire claim failed
        self._reload_wanted = False
        self.rng = rng or random.Random()  # the jitter of retry backoffs

    async def _on_timers(self, execution_ids: list[str]) -> None:
        raise NotImplementedError  # the firing part's

    # -- the one fenced write ---------------------------------------------------------------

    def told(self, ex: execution_pb2.Execution) -> list[Op]:
        """The ops that tell the children of ``ex``'s job how ``ex`` ended for good."""
        why = "; ".join(t for t in (ex.reason, ex.error) if t)
        return self.tell_children(ex.job_id, ex.scheduled_ms, ex.state, why)

    def tell_children(self, job_id: str, fire_ms: int, state: int, why: str) -> list[Op]:
        """The ops that tell ``job_id``'s children how its execution for ``fire_ms`` ended
        (``state``, and ``why`` unless it succeeded); none here: ``_part_deps.Depending``
        knows the children."""
        return []

    async def write(
        self,
        items: Sequence[Item],
        carried: Carried,
        what: str,
        *,
        orphans: bool = False,
        sort: bool = True,
    ) -> Written | None:
        """Writes ``items`` under the partition's fence; ``carried`` says, per item, whose
        work it carries. None when nothing is known written: the fence was lost (the
        partition stops), or the write failed or its outcome is unknown (what it carried is
        doubted; with ``orphans``, its executions too: nothing has them in flight any more,
        and one the store still holds unchanged is handed out again). Items not written are
        re-read (see :meth:`sort_out`), unless ``sort`` is False (what they wrote stays in
        memory and goes out with a later write)."""
        try:
            applied = await self.store.apply(items)
        except FencedOut as exc:
            self.fenced_out(exc)
            return None
        except SchedError as exc:
            log.warning(
                "partition %d: writing %s failed: %s", self.partition, what, exc,
                extra=self.log_fields,
            )  # fmt: skip
            self.doubt((j for j, _ in carried), (e for _, e in carried if e) if orphans else ())
            return None
        if not sort:
            return Written(applied.revisions, applied.rejected)
        return self.sort_out(applied, carried, what)

    def sort_out(self, applied: Applied, carried: Carried, what: str) -> Written:
        """Re-reads what a write did not write: an item the store refused on its own with
        backoff (:meth:`refused`), one whose compare failed at once (:meth:`doubt`)."""
        for n, why in applied.rejected.items():
            self.refused(what, carried[n][0], carried[n][1], why)
        self.doubt(
            carried[n][0]
            for n, good in enumerate(applied.ok)
            if not good and n not in applied.rejected
        )
        return Written(applied.revisions, applied.rejected)

    def fenced_out(self, exc: FencedOut) -> None:
        """The fence no longer holds (a newer owner exists): this partition must stop."""
        log.warning("%s; stopping", exc, extra=self.log_fields)  # the message names the partition
        self._stopping = True
        self.events.partition_lost(
            self.partition, f"fenced out: epoch {exc.epoch} is no longer current"
        )

    # -- doubts: store calls that failed or whose outcome is unknown ----------------------------

    def doubt(self, job_ids: Iterable[str], orphans: Iterable[str] = ()) -> None:
        """Marks jobs whose durable state memory may not match, to be re-read and reconciled.

        Every path that writes calls this (through :meth:`write`) when a store call failed,
        or its outcome is unknown, or one of its compares failed: the work it carried must
        not be dropped with it. ``orphans`` are executions of those jobs that nothing has in
        flight any more (a result or redelivery that was not written): if the store still
        holds one unchanged, it is handed out again with a new token (a worker that finished
        it answers from its ledger).
        """
        if self._doubts.add(job_ids, orphans):
            self._wake.set()

    def refused(self, what: str, job_id: str, execution_id: str, why: str) -> None:
        """The store refused, on its own, an item that wrote this work (see
        :class:`~._refusals.RefusedWrites`): it is re-read, and handed out again if the store
        still holds it, after a backoff that grows with each refusal; logged once, always
        counted.

        Args:
            what: what the item wrote (``"result"``, ``"claim"``, ...), the metric's label.
            job_id: the job whose state is re-read.
            execution_id: the execution the item carried ("" for a schedule fire's claim).
            why: the store's reason.
        """
        key = execution_id or job_id
        count, retry_at = self.refusals.record(key, self.clock.now_ms())
        self.recorder.write_rejected(what)
        log.log(
            logging.ERROR if count == 1 else logging.DEBUG,
            "partition %d: the store refused the %s of %s on its own (%s); the rest of its "
            "batch was written; trying it again in %d ms (refusal %d, backing off%s)",
            self.partition, what, key, why, retry_at - self.clock.now_ms(), count,
            "; later refusals are logged at debug level" if count == 1 else "",
            extra=self.log_fields,
        )  # fmt: skip
        self._doubts.add_later(retry_at, job_id, execution_id)
        self._wake.set()

    # -- executions in memory ---------------------------------------------------------------

    def run_fields(self, ex: execution_pb2.Execution, token: int = 0) -> dict[str, object]:
        """``extra=`` of a line about one execution of this partition."""
        fields = {**self.log_fields, "job": ex.job_id, "execution": ex.id}
        if token or ex.fencing_token:
            fields["token"] = token or ex.fencing_token
        return fields

    def prepare(self, live: Live) -> int:
        """Builds the dispatch message ahead of the fire (its deadline counts from due_ms);
        returns when its timer fires: ahead of the instant by the policy's lead (a worker may
        hold it), else at the instant."""
        cached = self.jobs.get(live.ex.job_id)
        job = cached.job if cached else None
        live.message = dispatch_message(live.ex, job, live.ex.due_ms, self.config)
        return live.ex.due_ms - self.policy.lead_ms(job)

    def arm_new(self, ex: execution_pb2.Execution) -> Live:
        """A claimed execution becomes live, its timer armed."""
        live = self.live[ex.id] = Live(ex)
        live.timer = self.driver.add(max(self.prepare(live), self.clock.now_ms()), ex.id)
        return live

    def arm_at(self, live: Live, fire_ms: int) -> None:
        """(Re-)arms the timer of a live execution for ``fire_ms``."""
        live.timer = self.driver.add(fire_ms, live.ex.id)

    def drop(self, live: Live) -> None:
        """The execution leaves memory: its timer goes, and it stops counting as running."""
        self.live.pop(live.ex.id, None)
        if live.timer is not None:
            self.driver.cancel(live.timer)
        self.running.discard(live.ex.job_id, live.ex.id)

    def cancel(self, live: Live, reason: str) -> None:
        """The execution left the partition (changed in the store): stop whatever it does."""
        self.drop(live)
        if live.dispatched:
            self.outbound.cancel(live.ex.id, live.ex.fencing_token, reason)

    def admitted(self, live: Live, slot_ms: int) -> None:
        """A fire that waited for its tenant's running slot got it: armed for its slot (the
        wheel fires it through the overlap policy like any other)."""
        if self.live.get(live.ex.id) is not live or live.dispatched:
            return  # it left meanwhile
        live.gate_due, live.slot_ms = live.ex.due_ms, slot_ms
        cached = self.jobs.get(live.ex.job_id)
        lead = self.policy.lead_ms(cached.job if cached else None)
        self.arm_at(live, max(slot_ms - lead, self.clock.now_ms()))

    def add_due(self, entry: DueEntry) -> None:
        """A due entry this node wrote (a retry's timer): claimed when due, if in the window."""
        if self.window.put(entry):
            self._wake.set()

    def dispatch_backlogged(self) -> bool:
        """The dispatch queue holds ``max_dispatch_backlog`` executions or more: claim
        nothing until it drains (see NodeConfig)."""
        bound = self.config.max_dispatch_backlog
        return bool(bound) and self.outbound.pending_count() >= bound

    # -- handing out --------------------------------------------------------------------------

    def send(self, lives: Sequence[Live], now: int) -> None:
        """Hands these out now (or holds those before their instant on a worker)."""
        if not lives:
            return
        if self.policy.sealed_in_memory():
            lives, refused = self.policy.split_sealed(lives, self.jobs)
            for live, _ in refused:  # the wheel fires them at once, and the fire refuses them
                self.arm_at(live, now)
        out = []
        early: list[Live] = []
        delays: list[float] = []
        dispatched = execution_pb2.EXECUTION_DISPATCHED
        for live in lives:
            ex = live.ex
            if live.instant() > now and not live.hold_refused:
                early.append(live)
                continue
            self._went_out(live, now)
            msg = self._message_now(live, now)
            live.message = None
            instant = live.instant()
            msg.due_ms = instant
            out.append(msg)
            ex.state = dispatched
            delays.append(now - instant)
        if out:
            self.outbound.submit(out)
            self.recorder.fired(delays)
        if early:
            self._hold(early, now)

    def _message_now(self, live: Live, now: int) -> worker_pb2.Dispatch:
        """The Dispatch to hand ``live`` out with at ``now``: the one built at its claim, or a
        new one when that was built for an earlier instant or token."""
        ex, msg = live.ex, live.message
        # A throttled one's message was built for an earlier instant: its deadline counts
        # from now.
        if msg is None or msg.fencing_token != ex.fencing_token or ex.throttled_ms:
            cached = self.jobs.get(ex.job_id)
            return dispatch_message(ex, cached.job if cached else None, now, self.config)
        if now > ex.due_ms and msg.deadline_ms:
            # Built at the claim for the due instant and fired late (a backlog, a node back
            # from downtime, a takeover): the attempt still gets its whole timeout, rather
            # than a deadline that passed before it could start.
            msg.deadline_ms += now - ex.due_ms
        return msg

    def _hold(self, lives: list[Live], now: int) -> None:
        """Fired ahead of their instant: a worker that can hold them gets them now; the rest
        are armed again for the instant itself."""
        msgs = []
        for live in lives:
            ex = live.ex
            msg = live.message
            instant = live.instant()
            if msg is None or msg.fencing_token != ex.fencing_token or instant != ex.due_ms:
                cached = self.jobs.get(ex.job_id)
                job = cached.job if cached else None
                msg = live.message = dispatch_message(ex, job, instant, self.config)
            msg.start_at_ms = msg.due_ms = instant
            msgs.append(msg)
        back = {d.execution_id for d in self.outbound.hold(msgs)}
        if len(back) < len(lives):
            self.recorder.fired((), held=len(lives) - len(back))
        for live in lives:
            if live.ex.id in back:
                live.hold_refused = True
                if live.message is not None:
                    live.message.start_at_ms = 0
                self.arm_at(live, live.instant())
                continue
            self._went_out(live, now)
            live.message = None
            live.ex.state = execution_pb2.EXECUTION_DISPATCHED

    def _went_out(self, live: Live, now: int) -> None:
        """``live`` is handed out (or held on a worker) at ``now``: it runs, as far as the
        overlap policies and the tenants' running caps are concerned."""
        live.dispatched = True
        ex = live.ex
        if live.buffered:
            live.buffered = False
            self.running.buffered.pop(ex.job_id, None)
        self.running.add(ex.job_id, ex.id)
        ex.dispatched_ms = now
        self.policy.went_out(ex.tenant, ex.id)
        if live.gate_due == ex.due_ms:
            ex.throttled_ms = max(0, live.slot_ms - ex.due_ms)
        elif ex.throttled_ms:  # an earlier attempt's
            ex.throttled_ms = 0

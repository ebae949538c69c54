"""Firing policy: what each fire the wheel hands a partition does at its instant.

:class:`FirePolicy` is shared by the partitions of a node and decides, writing nothing: a fire
goes out now, is held on a worker ahead of its instant, waits for its tenant's slot, is
skipped or buffered by its job's overlap policy (``allow``, ``forbid``, ``buffer_one``,
``replace``), or is refused because a value it would carry does not decrypt here. The
partition applies the :class:`FirePlan` it returns (its timers, its running index, its store
writes, its dispatch port): a partition's state has one writer.

The tenants' limits span the node's partitions, so the policy keeps them
(:class:`~._tenants.TenantLimiter`); fires that waited for a running slot go back to their
partition through ``on_admitted``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from schedd._clock import Clock
from schedd.node._config import NodeConfig
from schedd.node._live import Live, RunningIndex
from schedd.node._sealed import split_sealed
from schedd.node._tenants import Admitted, TenantLimiter
from schedd.obs import MetricsRecorder, NoopRecorder
from schedd.store import Sealer, StoredJob
from schedd.v1 import execution_pb2, job_pb2, scheduler_pb2, worker_pb2

#: Overlap policies whose decision does not depend on what runs at the instant: an execution
#: of such a job may be sent ahead to a worker that holds it.
HOLDABLE = frozenset({job_pb2.OVERLAP_ALLOW, job_pb2.OVERLAP_POLICY_UNSPECIFIED})
#: How much later a fire that came while the node was fenced (see ``may_act``) retries.
FENCED_RETRY_MS = 100

#: What a tenant's waiting fire carries back to its partition: (partition number, fire).
Waiter = tuple[int, Live]


def _always() -> bool:
    return True


@dataclass(slots=True)
class FirePlan:
    """What the partition does with the fires of one wheel expiry.

    Attributes:
        send: go now (held on a worker instead when still ahead of their instant).
        skip: dropped by the overlap policy: recorded SKIPPED.
        refuse: a value they carry does not decrypt here: dead letters, never sent.
        slots: fires their tenant's rate limit gave a slot (the partition keeps it on them).
        later: fires re-armed for a later instant (their slot, or shortly: node fenced).
        buffer: BUFFER_ONE fires that wait for their job's running execution to end.
        replace: running executions a REPLACE fire cancels.
    """

    send: list[Live] = field(default_factory=list)
    skip: list[Live] = field(default_factory=list)
    refuse: list[tuple[Live, str]] = field(default_factory=list)
    slots: list[tuple[Live, int]] = field(default_factory=list)
    later: list[tuple[Live, int]] = field(default_factory=list)
    buffer: list[Live] = field(default_factory=list)
    replace: list[str] = field(default_factory=list)


class FirePolicy:
    """Decides fires for every partition of a node (see the module's docstring).

    Args:
        config: the node's settings (hold, fire slice, timeouts).
        clock: the node's clock (fires let go by the tenants' limits are paced from now).
        may_act: whether the node may fire now, tied to its session's self-fencing: while it
            says no, fires wait (re-armed shortly after), since a node that may have lost its
            lease must not hand out what a new owner hands out again.
        sealer: while it counts values it could not decrypt, what would carry one is refused.
        recorder: where throttled fires are counted (nowhere by default).
        on_admitted: where fires that waited for their tenant's running slot go when let go.
        share: the fraction of the tenants' limits this node enforces (partitions owned /
            partitions).
        is_live: whether an execution is still live on this node (the limiter's sweep).
    """

    def __init__(
        self,
        config: NodeConfig,
        clock: Clock,
        *,
        may_act: Callable[[], bool] = _always,
        sealer: Sealer | None = None,
        recorder: MetricsRecorder | None = None,
        on_admitted: Callable[[list[Admitted[Waiter]]], None] = lambda _a: None,
        share: Callable[[], float] = lambda: 1.0,
        is_live: Callable[[str], bool] = lambda _eid: True,
    ) -> None:
        self.config = config
        self.clock = clock
        self.may_act = may_act
        self.sealer = sealer
        self.recorder: MetricsRecorder = recorder or NoopRecorder()
        self.slices = FireSlices(config.fire_slice)
        #: Per-tenant rate and running limits (the node keeps their limits current).
        self.tenants: TenantLimiter[Waiter] = TenantLimiter(share=share, is_live=is_live)
        self._on_admitted = on_admitted
        self._drain_queued = False

    def lead_ms(self, job: job_pb2.Job | None) -> int:
        """How long before its instant a fire of ``job`` is handed out: ``hold_ms`` when its
        overlap policy cannot depend on the instant (a worker may hold it), else 0."""
        hold = self.config.hold_ms
        return hold if hold > 0 and job is not None and job.overlap in HOLDABLE else 0

    def decide(
        self,
        lives: Sequence[Live],
        jobs: Mapping[str, StoredJob],
        running: RunningIndex,
        now: int,
        partition: int,
    ) -> FirePlan:
        """What these fires do now (``partition`` is theirs: a tenant's waiting fire goes
        back to it)."""
        plan = FirePlan()
        if not self.may_act():
            plan.later = [(lv, now + FENCED_RETRY_MS) for lv in lives]
            return plan
        if self.sealed_in_memory():
            lives, plan.refuse = self.split_sealed(lives, jobs)
        if self.tenants:
            lives = self._gate(lives, jobs, now, partition, plan)
        by_job = running.by_job
        for live in lives:
            if live.ex.job_id not in by_job:  # nothing of this job runs: every policy sends it
                plan.send.append(live)
            else:
                self._overlap(live, jobs, running, plan)
        return plan

    def _gate(
        self,
        lives: Sequence[Live],
        jobs: Mapping[str, StoredJob],
        now: int,
        partition: int,
        plan: FirePlan,
    ) -> list[Live]:
        """Applies the tenants' limits: returns the fires that may go now; the rest get their
        slots in ``plan`` or wait for a running slot (see :mod:`._tenants`)."""
        tenants = self.tenants
        out: list[Live] = []
        for live in lives:
            ex = live.ex
            if live.gate_due == ex.due_ms or not tenants.limited(ex.tenant):
                out.append(live)  # admitted earlier and fired again at its slot, or unlimited
                continue
            slot = tenants.admit(ex.tenant, ex.id, max(ex.due_ms, now), now, (partition, live))
            if slot is None:
                continue
            plan.slots.append((live, slot))
            cached = jobs.get(ex.job_id)
            fire_at = slot - self.lead_ms(cached.job if cached else None)
            if fire_at > now:
                plan.later.append((live, fire_at))
            else:
                out.append(live)
        if len(out) < len(lives):
            self.recorder.throttled(len(lives) - len(out))
        return out

    @staticmethod
    def _overlap(
        live: Live, jobs: Mapping[str, StoredJob], running: RunningIndex, plan: FirePlan
    ) -> None:
        """The job has an execution out: its overlap policy decides what this fire does."""
        job_id, eid = live.ex.job_id, live.ex.id
        busy = [e for e in running.ids(job_id) if e != eid]
        cached = jobs.get(job_id)
        policy = cached.job.overlap if cached else job_pb2.OVERLAP_ALLOW
        if not busy or policy in HOLDABLE:
            plan.send.append(live)
        elif policy == job_pb2.OVERLAP_FORBID:
            plan.skip.append(live)
        elif policy == job_pb2.OVERLAP_BUFFER_ONE:
            if job_id in running.buffered or any(b.ex.job_id == job_id for b in plan.buffer):
                plan.skip.append(live)
            else:
                plan.buffer.append(live)
        else:  # REPLACE
            plan.replace += busy
            plan.send.append(live)

    # -- sealed values ----------------------------------------------------------------------

    def sealed_in_memory(self) -> bool:
        """Whether a read left a value encrypted (it could not decrypt it): from then on,
        every dispatch is checked (see :meth:`split_sealed`); until then, none needs to be."""
        return self.sealer is not None and self.sealer.failures > 0

    def split_sealed(
        self, lives: Sequence[Live], jobs: Mapping[str, StoredJob]
    ) -> tuple[list[Live], list[tuple[Live, str]]]:
        """(what may be dispatched, what may not with why); see :mod:`._sealed`."""
        if self.sealer is None:
            return list(lives), []
        return split_sealed(self.sealer, jobs, lives)

    # -- tenants' running slots ---------------------------------------------------------------

    def went_out(self, tenant: str, execution_id: str) -> None:
        """An execution was handed out: it counts against its tenant's running cap."""
        if self.tenants:
            self.tenants.running(tenant, execution_id)

    def released(self, execution_id: str) -> None:
        """An execution ended or left: a tenant at its running cap may admit the next."""
        if self.tenants.release(execution_id) and not self._drain_queued:
            self._drain_queued = True
            asyncio.get_running_loop().call_soon(self._drain)

    def set_limits(self, limits: Mapping[str, scheduler_pb2.TenantLimits]) -> None:
        """Replaces the tenants' limits; fires they no longer hold back go to their partitions."""
        self._on_admitted(self.tenants.set_limits(limits))
        self._on_admitted(self.tenants.drain(self.clock.now_ms()))

    def _drain(self) -> None:
        self._drain_queued = False
        self._on_admitted(self.tenants.drain(self.clock.now_ms()))


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

"""Per-tenant limits on one node: fires per second (with a burst) and executions at once.

A tenant's limits (``tenants/{tenant}`` in etcd, :class:`TenantLimits`) hold cluster-wide:
each node enforces its *share*, the fraction of the partitions it owns (a job's partition is
a hash of its id, so a tenant's jobs spread over partitions in proportion). The shares add up
to the limit; a tenant whose due fires fall unevenly on the partitions gets less than its
limit at that moment, never more.

**Rate** is paced with a virtual schedule (GCRA): each tenant has a theoretical arrival time
``tat``; a fire arriving at ``t`` (its due time, or now when it is already late) gets the slot
``max(t, tat - tolerance)`` and moves ``tat`` to ``max(tat, slot) + interval``, where
``interval = 1000 / (rate * share)`` ms and ``tolerance = (burst * share - 1) * interval``.
Slots are handed out in the order fires arrive, so a throttled tenant's fires keep their
order and none is dropped: it waits for its slot in the timer wheel like any other fire,
and a fire that may be held on a worker ahead of its instant is held for its slot.

**Running at once** counts every execution the node admitted or handed out for the tenant
and has not seen end (held ahead of the instant counts). Past the cap, fires wait in a FIFO
per tenant and are admitted, in order, as executions end.

Worked example: rate 2 per second, burst 2, share 1; five fires due at t=0 get slots 0, 0,
500, 1000, 1500 ms.

Pure and synchronous: the :class:`~._fire_policy.FirePolicy` calls it and acts on its answers; the
clock is whatever ``now_ms`` the caller passes.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from schedd.v1 import scheduler_pb2

T = TypeVar("T")

#: How often (at most) a tenant at its running cap checks that what it counts still runs here:
#: an execution that left by a path that did not release it must not hold a slot for good.
SWEEP_INTERVAL_MS = 1_000


def describe_limits(limits: Mapping[str, scheduler_pb2.TenantLimits]) -> str:
    """``a: 100/s burst 200, 50 running; b: 10 running`` (for logs and the CLI)."""
    parts = []
    for tenant in sorted(limits):
        lim = limits[tenant]
        terms = []
        if lim.rate:
            terms.append(f"{lim.rate:g}/s burst {lim.burst}")
        if lim.max_running:
            terms.append(f"{lim.max_running} running")
        if lim.max_jobs:
            terms.append(f"{lim.max_jobs} jobs")
        if lim.api_rate:
            terms.append(f"API {lim.api_rate:g}/s burst {lim.api_burst}")
        parts.append(f"{tenant}: {', '.join(terms)}")
    return "; ".join(parts)


@dataclass
class _Waiting(Generic[T]):
    execution_id: str
    due_ms: int
    item: T


@dataclass
class _Tenant(Generic[T]):
    limits: scheduler_pb2.TenantLimits
    tat_ms: float = -math.inf
    active: set[str] = field(default_factory=set)
    waiting: deque[_Waiting[T]] = field(default_factory=deque)
    swept_ms: int = 0


@dataclass(frozen=True)
class Admitted(Generic[T]):
    """A fire that waited for a running slot and now has one: run it at ``slot_ms``."""

    item: T
    execution_id: str
    slot_ms: int


class TenantLimiter(Generic[T]):
    """Slots for the fires of limited tenants, and who waits for a running slot.

    Attributes:
        share: the fraction of the cluster's limits this node enforces (partitions owned /
            partitions); the node keeps it current.
        is_live: whether an execution id is still live on this node (the sweep drops the
            rest from the running counts).
    """

    def __init__(
        self,
        share: Callable[[], float] = lambda: 1.0,
        is_live: Callable[[str], bool] = lambda _eid: True,
    ) -> None:
        self._tenants: dict[str, _Tenant[T]] = {}
        self._tenant_of: dict[str, str] = {}  # execution id -> tenant, while it counts as running
        self.share = share
        self.is_live = is_live

    # -- limits ----------------------------------------------------------------------------------

    def __bool__(self) -> bool:
        """Whether any tenant has limits (else every fire passes untouched)."""
        return bool(self._tenants)

    def limited(self, tenant: str) -> bool:
        return tenant in self._tenants

    def limits(self) -> dict[str, scheduler_pb2.TenantLimits]:
        return {t: s.limits for t, s in self._tenants.items()}

    def set_limits(self, limits: Mapping[str, scheduler_pb2.TenantLimits]) -> list[Admitted[T]]:
        """Replaces every tenant's limits. A tenant whose limits were lifted lets its waiting
        fires go: those are returned, in order, to be run at once (after a raised cap, call
        :meth:`drain`)."""
        released: list[Admitted[T]] = []
        for tenant in list(self._tenants):
            if tenant not in limits:
                gone = self._tenants.pop(tenant)
                for eid in gone.active:
                    self._tenant_of.pop(eid, None)
                released.extend(Admitted(w.item, w.execution_id, w.due_ms) for w in gone.waiting)
        for tenant, new in limits.items():
            kept = self._tenants.get(tenant)
            if kept is None:
                self._tenants[tenant] = _Tenant(new)
            else:
                kept.limits = new
        return released

    # -- admission -------------------------------------------------------------------------------

    def admit(
        self, tenant: str, execution_id: str, due_ms: int, now_ms: int, item: T
    ) -> int | None:
        """The slot (ms) at which this fire may go, or None: it waits for a running slot and
        comes back from :meth:`release` / :meth:`drain` in order. An unlimited tenant's fire
        goes at ``due_ms``."""
        state = self._tenants.get(tenant)
        if state is None:
            return due_ms
        cap = self._cap(state)
        if cap:
            if execution_id in state.active:  # admitted before (e.g. fired again): keeps its place
                return self._pace(state, due_ms, now_ms)
            if state.waiting or len(state.active) >= cap:
                if len(state.active) >= cap:
                    self._sweep(state, now_ms)
                if state.waiting or len(state.active) >= cap:
                    state.waiting.append(_Waiting(execution_id, due_ms, item))
                    return None
            state.active.add(execution_id)
            self._tenant_of[execution_id] = tenant
        return self._pace(state, due_ms, now_ms)

    def running(self, tenant: str, execution_id: str) -> None:
        """An execution of ``tenant`` went out without :meth:`admit` (handed out again, or
        found on a worker after a takeover): it counts as running until released."""
        state = self._tenants.get(tenant)
        if state is not None and state.limits.max_running and execution_id not in state.active:
            state.active.add(execution_id)
            self._tenant_of[execution_id] = tenant

    def release(self, execution_id: str) -> bool:
        """The execution ended or left this node; returns whether a tenant may now admit a
        waiting fire (call :meth:`drain`)."""
        tenant = self._tenant_of.pop(execution_id, None)
        if tenant is None:
            return False
        state = self._tenants.get(tenant)
        if state is None:
            return False
        state.active.discard(execution_id)
        return bool(state.waiting)

    def drain(self, now_ms: int) -> list[Admitted[T]]:
        """Waiting fires that now fit under their tenant's running cap, in order, with their
        slots (paced from now: they are late already)."""
        out: list[Admitted[T]] = []
        for tenant, state in self._tenants.items():
            cap = self._cap(state)
            while state.waiting and (not cap or len(state.active) < cap):
                w = state.waiting.popleft()
                if not self.is_live(w.execution_id):
                    continue  # it left meanwhile (cancelled, partition moved)
                state.active.add(w.execution_id)
                self._tenant_of[w.execution_id] = tenant
                slot = max(self._pace(state, w.due_ms, now_ms), now_ms)
                out.append(Admitted(w.item, w.execution_id, slot))
        return out

    # -- introspection ---------------------------------------------------------------------------

    def counts(self, tenant: str) -> tuple[int, int]:
        """(running, waiting) of ``tenant`` on this node."""
        state = self._tenants.get(tenant)
        return (len(state.active), len(state.waiting)) if state else (0, 0)

    def forget(self, execution_ids: Iterable[str]) -> None:
        for eid in execution_ids:
            self.release(eid)

    # -- internals -------------------------------------------------------------------------------

    def _cap(self, state: _Tenant[T]) -> int:
        limit = state.limits.max_running
        if not limit:
            return 0
        return max(1, math.floor(limit * self.share() + 1e-9))

    def _pace(self, state: _Tenant[T], due_ms: int, now_ms: int) -> int:
        rate = state.limits.rate
        if not rate:
            return due_ms
        share = self.share()
        if share <= 0:
            return max(due_ms, now_ms)
        interval = 1000.0 / (rate * share)
        burst = max(1.0, (state.limits.burst or math.ceil(rate)) * share)
        tolerance = (burst - 1.0) * interval
        arrival = max(due_ms, now_ms)
        slot = max(float(arrival), state.tat_ms - tolerance)
        state.tat_ms = max(state.tat_ms, slot) + interval
        return math.ceil(slot)

    def _sweep(self, state: _Tenant[T], now_ms: int) -> None:
        if now_ms - state.swept_ms < SWEEP_INTERVAL_MS:
            return
        state.swept_ms = now_ms
        gone = [eid for eid in state.active if not self.is_live(eid)]
        for eid in gone:
            state.active.discard(eid)
            self._tenant_of.pop(eid, None)

"""A partition's fires: what it does when its wheel hands it expired timers.

The node's :class:`~._fire_policy.FirePolicy` decides each fire (send, hold, skip, refuse,
wait for a tenant's slot, buffer, replace); this part applies the decision: timers, the running
index, the writes of what ends here (skips and refusals), and the hand-out through the
partition's port. Fires go a slice per event-loop pass (see :class:`~._fire_policy.FireSlices`).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from schedd.node._fire_policy import FirePlan
from schedd.node._live import Live
from schedd.node._part_core import PartitionCore, carried_by
from schedd.node._sealed import refusal
from schedd.store import Item
from schedd.v1 import execution_pb2

log = logging.getLogger(__name__)

SKIPPED_REASON = "overlap policy: a previous run of this job is still running"


class Firing(PartitionCore):
    """The fire path of a partition."""

    async def _on_timers(self, execution_ids: list[str]) -> None:
        lives = [self.live[e] for e in execution_ids if e in self.live]
        if lives:
            await self.fire(lives)

    async def fire(self, lives: list[Live]) -> None:
        """The wheel fired these: the policy decides, this applies, one slice at a time.

        When other partitions already fired a slice's worth on this loop pass (a burst
        instant: every partition's wheel is due on the same pass), this one waits for the
        next pass, so the stream writes their fires woke go first and the first handlers
        start while the rest of the burst is still being fired. More than a slice from one
        partition is fired a slice at a time the same way.
        """
        size = self.policy.slices.size
        if size and len(lives) > size:  # one partition's share of a burst: a slice per pass
            for i in range(0, len(lives), size):
                await self._fire(lives[i : i + size], stale=i > 0)
            return
        await self._fire(lives)

    async def _fire(self, lives: list[Live], stale: bool = False) -> None:
        slices = self.policy.slices
        while slices.full():
            await slices.next_pass()
            stale = True
        if stale:  # the loop ran since the wheel fired them: keep only those still held
            held = self.live
            lives = [lv for lv in lives if held.get(lv.ex.id) is lv and not lv.dispatched]
        slices.used(len(lives))
        now = self.clock.now_ms()
        plan = self.policy.decide(lives, self.jobs, self.running, now, self.partition)
        await self._apply(plan, now)

    async def _apply(self, plan: FirePlan, now: int) -> None:
        for live, slot in plan.slots:
            live.gate_due, live.slot_ms = live.ex.due_ms, slot
        for live, at_ms in plan.later:
            self.arm_at(live, at_ms)
        for live in plan.buffer:
            live.buffered = True
            self.running.buffered[live.ex.job_id] = live
        for eid in plan.replace:
            old = self.live.get(eid)
            if old is not None:
                old.cancelling = True
                self.outbound.cancel(eid, old.ex.fencing_token, "replaced by a newer fire")
        if plan.refuse:
            await self._refuse(plan.refuse, now)
        if plan.skip:
            await self._skip(plan.skip, now)
        self.send(plan.send, now)

    async def _skip(self, lives: Sequence[Live], now: int) -> None:
        """Records fires the overlap policy dropped as SKIPPED (their runs leave the store)."""
        items, finals = [], []
        for live in lives:
            self.drop(live)
            final = execution_pb2.Execution()
            final.CopyFrom(live.ex)
            final.state = execution_pb2.EXECUTION_SKIPPED
            final.reason = SKIPPED_REASON
            final.finished_ms = now
            items.append(self.store.finish_run(live.ex, then=self.told(final)))
            finals.append(final)
        await self._record_ended(items, finals, "skips")

    async def _refuse(self, refused: Sequence[tuple[Live, str]], now: int) -> None:
        """Ends executions a value of which does not decrypt here as dead letters, never
        sent to a worker (see :mod:`._sealed`)."""
        items, finals = [], []
        for live, problem in refused:
            self.drop(live)
            dead = refusal(live.ex, problem, now)
            items.append(self.store.finish_run(live.ex, dead_record=dead, then=self.told(dead)))
            finals.append(dead)
            log.error(
                "execution %s is a dead letter, not dispatched: %s", live.ex.id, problem,
                extra=self.run_fields(live.ex),
            )  # fmt: skip
        for _ in await self._record_ended(items, finals, "refusals"):
            self.recorder.dead_lettered()

    async def _record_ended(
        self, items: list[Item], finals: list[execution_pb2.Execution], what: str
    ) -> list[execution_pb2.Execution]:
        """Writes the end of executions that already left memory, then their history; returns
        those written. What was not written is re-read (and adopted again if the store still
        holds it: it left memory)."""
        written = await self.write(items, carried_by(finals), what)
        if written is None:
            return []
        done = [f for f, rev in zip(finals, written.revisions, strict=True) if rev]
        self.history.record(done)
        return done

"""One owned partition: window loader, claims ahead of the fire, the timer wheel, the firer.

The life of a schedule fire here::

    due/p/{due_ms}/{job} in etcd --load (window W)--> self.due (sorted, in memory)
        --claim at due_ms - L (batched, fenced txn)--> runs/p/{job}/{sched} PENDING, token = rev
        --wheel timer at due_ms--> Dispatch on a worker stream (no etcd on this path)
        --Result with the token--> one fenced compare-and-delete (or retry / dead letter)

Everything that matters is in etcd; this object is rebuilt from it on start or takeover, and
every execution it inherits is re-tokened before it is dispatched again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from sortedcontainers import SortedDict

from schedd._clock import Clock
from schedd._errors import FencedOut, SchedError
from schedd._gc import freeze_survivors
from schedd.history import History
from schedd.node._config import NodeConfig
from schedd.node._executions import Live, Outcomes
from schedd.schedule import Schedule, jitter_offset_ms, parse_schedule, plan_misfires
from schedd.store import (
    FIRE,
    DueEntry,
    Item,
    JobState,
    JobView,
    PartitionStore,
    StoredJob,
    execution_from,
    execution_template,
    new_execution,
)
from schedd.timerwheel import TimerWheel, WheelDriver
from schedd.v1 import execution_pb2, job_pb2

log = logging.getLogger(__name__)
#: After a claim round (or a window load) at least this large, what is alive is frozen (see
#: schedd._gc): claimed executions live until their fire. Every round, not only big ones: with
#: 512 the spread load still met 10-20 ms older-generation pauses every second or two (p99
#: 6.6-11.6 ms); freezing each round (an O(1) list splice) gave 5.0-5.4 ms, sustained 5k/s
#: p99 94-168 -> 69 ms.
_FREEZE_AFTER = 1

_MISFIRE_MODES = {
    job_pb2.MISFIRE_CATCH_UP: "catch_up",
    job_pb2.MISFIRE_ONCE: "once",
    job_pb2.MISFIRE_SKIP: "skip",
}


@dataclass(slots=True)
class _Compiled:
    """What the claim path derives from one version of a job's spec, kept while it lasts."""

    spec_revision: int
    schedule: Schedule
    #: The fields every first attempt shares; executions are copies of it.
    template: execution_pb2.Execution


@dataclass(slots=True)
class _Claim:
    """A planned claim: the due entry, what the item writes, and what to do once it holds."""

    entry: DueEntry
    item: Item
    executions: list[execution_pb2.Execution]
    next_state: JobState | None = None
    missed: list[execution_pb2.Execution] | None = None


class PartitionRunner:
    """Schedules the jobs of one partition while this node holds its fence."""

    def __init__(
        self,
        store: PartitionStore,
        config: NodeConfig,
        clock: Clock,
        history: History,
        outcomes: Outcomes,
    ) -> None:
        self.store = store
        self.partition = store.partition
        self.config = config
        self.clock = clock
        self.history = history
        self.out = outcomes
        self.due: SortedDict = SortedDict()  # (due_ms, job_id) -> DueEntry
        self.jobs: dict[str, StoredJob] = {}
        self._compiled: dict[str, _Compiled] = {}  # job id -> its current spec, compiled
        self.live: dict[str, Live] = {}
        self.window_end = 0
        self.wheel: TimerWheel[str] = TimerWheel(tick_ms=config.tick_ms, start_ms=clock.now_ms())
        self.driver: WheelDriver[str] = WheelDriver(self.wheel, clock, self._on_timers)
        self._wake = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._lock = asyncio.Lock()
        self.stopped = asyncio.Event()
        #: Measured claims per second (EWMA), for stretching the lead ahead of bursts.
        self.claim_rate = config.claim_rate
        #: How many partitions this node owns (set by the node): they share its claim rate.
        self.partitions_owned = 1

    # -- lifecycle ----------------------------------------------------------------------------

    async def start(self) -> None:
        """Loads the window and the live executions, re-tokens inherited ones, starts loops."""
        now = self.clock.now_ms()
        # Set first: creations notified while the load is in flight are kept, not dropped.
        self.window_end = now + self.config.window_ms
        entries, _ = await self.store.load_due(self.window_end)
        for e in entries:
            self.due[(e.due_ms, e.job_id)] = e
        waiting = {(e.job_id, e.scheduled_ms) for e in entries if e.kind != FIRE}
        runs = await self.store.load_runs()
        inherited = [r for r in runs if (r.job_id, r.scheduled_ms) not in waiting]
        inherited = [r for r in inherited if r.state != execution_pb2.EXECUTION_RETRY_WAIT]
        await self._adopt(inherited)
        self._tasks = [
            asyncio.create_task(self._claim_loop(), name=f"claim-{self.partition}"),
            asyncio.create_task(self.driver.run(), name=f"wheel-{self.partition}"),
        ]
        log.info(
            "partition %d: loaded %d due entries, adopted %d live executions (epoch %d)",
            self.partition, len(entries), len(inherited), self.store.fence.epoch,
        )  # fmt: skip

    async def stop(self) -> list[str]:
        """Stops the loops; returns the ids of executions this runner had in memory."""
        self.driver.stop()
        for t in self._tasks:
            t.cancel()
        for t in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
        self.stopped.set()
        return list(self.live)

    async def unclaim(self) -> int:
        """Gives back claimed schedule fires not yet dispatched (graceful release).

        The next owner then sees them as due entries and applies each job's misfire policy,
        instead of inheriting claims it must honour. Returns how many were given back.
        """
        async with self._lock:
            by_job: dict[str, list[Live]] = {}
            for live in self.live.values():
                if not live.dispatched and live.ex.trigger == execution_pb2.TRIGGER_SCHEDULE:
                    by_job.setdefault(live.ex.job_id, []).append(live)
            items, groups = [], []
            for job_id, lives in by_job.items():
                cached = self.jobs.get(job_id)
                if cached is None:
                    continue
                items.append(self.store.unclaim(cached, [lv.ex for lv in lives]))
                groups.append(lives)
            if not items:
                return 0
            try:
                ok, _ = await self.store.apply(items)
            except (FencedOut, SchedError) as exc:
                log.warning(
                    "partition %d: could not give back claimed fires (%s); the next owner "
                    "adopts them as claimed",
                    self.partition,
                    exc,
                )
                return 0
            n = 0
            for lives, good in zip(groups, ok, strict=True):
                if good:
                    for lv in lives:
                        self.live.pop(lv.ex.id, None)
                        if lv.timer is not None:
                            self.driver.cancel(lv.timer)
                    n += len(lives)
            return n

    def _fenced_out(self, exc: FencedOut) -> None:
        log.warning("partition %d: %s; stopping", self.partition, exc)
        self.out.partition_lost(self.partition, str(exc))

    async def _adopt(self, runs: Sequence[execution_pb2.Execution]) -> None:
        """Re-tokens executions a previous epoch may have sent out, then arms their timers."""
        if not runs:
            return
        items = []
        for r in runs:
            r.state = execution_pb2.EXECUTION_PENDING
            r.worker_id = ""
            items.append(self.store.rewrite_run(r))
        ok, revs = await self.store.apply_each(items)
        for r, good, rev in zip(runs, ok, revs, strict=True):
            if good:
                r.fencing_token = rev
                self._arm(r)

    def _arm(self, ex: execution_pb2.Execution) -> None:
        live = Live(ex)
        self.live[ex.id] = live
        fire_ms = self.out.prepare(self, live)
        live.timer = self.driver.add(max(fire_ms, self.clock.now_ms()), ex.id)

    # -- claims -----------------------------------------------------------------------------

    async def _claim_loop(self) -> None:
        while True:
            try:
                await self._claim_round()
            except FencedOut as exc:
                self._fenced_out(exc)
                return
            except SchedError as exc:
                log.warning("partition %d: claim round failed: %s; retrying", self.partition, exc)
                await self.clock.sleep(0.5)

    async def _claim_round(self) -> None:
        now = self.clock.now_ms()
        if now + self.config.window_ms // 2 >= self.window_end:
            await self._extend_window(now)
        batch = self._take_due(self.claim_horizon(now))
        if batch:
            started = self.clock.monotonic()
            async with self._lock:
                failed = await self._claim(batch)
            self._observe_rate(len(batch), self.clock.monotonic() - started)
            if len(batch) >= _FREEZE_AFTER:
                freeze_survivors()  # they all live until their fire: see schedd._gc
            if failed:  # a concurrent API change: re-read those jobs, their entries come back
                await self.reconcile(failed)
            return
        wait_ms = self.next_claim_wait_ms(now)
        self._wake.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._wake.wait(), max(0.005, wait_ms / 1000))

    def next_claim_wait_ms(self, now: int) -> int:
        """How long the claim loop may sleep when a round found nothing to claim.

        Until the window needs extending or the earliest entry reaches its lead; but once the
        entries of the window would take about as long to claim (at the planned rate) as the
        time left before that lead, :meth:`claim_horizon` may start them early at any moment,
        so from then on the loop looks again every 250 ms.
        """
        wait_ms = self.window_end - self.config.window_ms // 2 - now
        if self.due:
            first_due = self.due.peekitem(0)[0][0]
            wait_ms = min(wait_ms, first_due - self.config.lead_ms - now)
            # Sleep until claiming them all would take within a second of what is left, then
            # poll (new entries wake the loop anyway, so this is redone when the count grows).
            claim_ms = len(self.due) / self._planned_rate_per_ms()
            if claim_ms > self.config.claim_slice_ms:  # more than a trickle
                wait_ms = min(wait_ms, max(250, int(wait_ms - claim_ms - 1000)))
        return wait_ms

    def _planned_rate_per_ms(self) -> float:
        """Claims per ms to plan with: this partition's share of the node's rate, or what it
        measured if that is lower, with a 30% margin."""
        share = self.config.claim_rate / max(1, self.partitions_owned)
        return max(min(self.claim_rate, share), 50.0) * 0.7 / 1000.0

    def claim_horizon(self, now: int) -> int:
        """How far ahead to claim now: L plus one claim slice, stretched ahead of bursts.

        A round is started when the earliest entry is L ahead and takes a slice beyond it, so
        entries spread thin are claimed in batches. That suffices for a steady trickle. For a
        burst (100k fires due at :00) claiming takes longer than L at the rate etcd sustains,
        so the horizon extends to every point h whose backlog (entries due up to h, at the
        measured claim rate) needs more time than the slack before h: claims then start early
        enough to be durable by the fire.
        """
        horizon = now + self.config.lead_ms + self.config.claim_slice_ms
        rate_per_ms = self._planned_rate_per_ms()
        for seconds in range(1, self.config.window_ms // 1000 + 1):
            h = horizon + seconds * 1000
            if h > self.window_end:
                break
            backlog = self.due.bisect_right((h, "\U0010ffff"))
            if backlog / rate_per_ms > seconds * 1000:
                horizon = h
        return horizon

    def _observe_rate(self, claimed: int, elapsed_s: float) -> None:
        if claimed >= 64 and elapsed_s > 0:
            self.claim_rate = 0.7 * self.claim_rate + 0.3 * (claimed / elapsed_s)

    async def _extend_window(self, now: int) -> None:
        # Entries inside the old window are known already (loaded, or written by our claims,
        # or brought by notify); only the new slice is read.
        entries, _ = await self.store.load_due(
            now + self.config.window_ms, after_ms=self.window_end
        )
        for e in entries:
            self.due.setdefault((e.due_ms, e.job_id), e)
        self.window_end = now + self.config.window_ms
        if len(entries) >= _FREEZE_AFTER:
            freeze_survivors()

    def _take_due(self, horizon_ms: int) -> list[DueEntry]:
        """Due entries up to the horizon, at most one per job (one txn cannot touch a key twice)."""
        taken: list[DueEntry] = []
        seen: set[str] = set()
        for key in list(self.due.irange(maximum=(horizon_ms, "\U0010ffff"))):
            entry = self.due[key]
            if entry.job_id in seen:
                continue
            seen.add(entry.job_id)
            del self.due[key]
            taken.append(entry)
            if len(taken) >= self.config.claim_batch:
                break
        return taken

    async def _claim(self, entries: list[DueEntry]) -> list[str]:
        """Claims these due entries in batched fenced txns; returns the jobs whose claim failed."""
        missing = [e.job_id for e in entries if e.job_id not in self.jobs]
        if missing:
            self.jobs.update(await self.store.fetch_jobs(missing))
        runs = await self.store.get_runs(
            (e.job_id, e.scheduled_ms) for e in entries if e.kind != FIRE
        )
        failed: list[str] = []
        step = self.config.txn_items
        for i in range(0, len(entries), step):
            # One transaction's worth at a time: planning is CPU work, and the wheel of this
            # loop must get its turn between chunks (aligned jobs become claimable exactly at
            # the fire instants of other aligned jobs).
            failed += await self._claim_chunk(entries[i : i + step], runs)
            await self._yield_to_fires()
        return failed

    async def _yield_to_fires(self) -> None:
        """Lets the wheel go first when one of its buckets is due within a few ticks."""
        nxt = self.driver.wheel.next_expiry_ms()
        wait_ms = -1 if nxt is None else nxt - self.clock.now_ms()
        if 0 <= wait_ms <= 5 * self.config.tick_ms:
            await asyncio.sleep((wait_ms + 1) / 1000)
        else:
            await asyncio.sleep(0)

    async def _claim_chunk(
        self,
        entries: list[DueEntry],
        runs: dict[tuple[str, int], execution_pb2.Execution],
    ) -> list[str]:
        now = self.clock.now_ms()
        claims: list[_Claim] = []
        for entry in entries:
            cached = self.jobs.get(entry.job_id)
            if cached is None:
                claims.append(_Claim(entry, self.store.drop_due(entry), []))
            elif entry.kind == FIRE:
                claims.append(self._plan_fire(entry, cached, now))
            else:
                claims.append(self._plan_run(entry, runs.get((entry.job_id, entry.scheduled_ms))))
        ok, revs = await self.store.apply_each([c.item for c in claims])
        failed: list[str] = []
        for claim, good, rev in zip(claims, ok, revs, strict=True):
            if good:
                self._claimed(claim, rev)
            else:
                failed.append(claim.entry.job_id)
        return failed

    def _compile(self, cached: StoredJob) -> _Compiled:
        """The job's schedule and execution template, parsed once per spec revision."""
        job_id = cached.job.id
        comp = self._compiled.get(job_id)
        if comp is None or comp.spec_revision != cached.spec_revision:
            job = cached.job
            sched = parse_schedule(
                job.schedule.expr, job.schedule.timezone, anchor_ms=job.created_ms
            )
            comp = _Compiled(cached.spec_revision, sched, execution_template(job, self.partition))
            self._compiled[job_id] = comp
        return comp

    def _plan_fire(self, entry: DueEntry, cached: StoredJob, now: int) -> _Claim:
        job, comp = cached.job, self._compile(cached)
        sched = comp.schedule
        missed: list[execution_pb2.Execution] = []
        if now - entry.due_ms <= self.config.grace_ms:  # on time: the common case
            f = entry.scheduled_ms
            executions = [self._new_run(comp, job, f, now)]
            last = f
            nxt = sched.next_fire(f)
        else:
            plan = plan_misfires(
                sched,
                cursor_ms=entry.scheduled_ms - 1,
                now_ms=now,
                mode=_MISFIRE_MODES.get(job.misfire.mode, "once"),
                catch_up_limit=job.misfire.catch_up_limit or 10,
                starting_deadline_ms=job.misfire.starting_deadline_ms,
                grace_ms=self.config.grace_ms,
            )
            fires, nxt = plan.run, plan.next_fire_ms
            missed = [self._missed(job, f, reason, now) for f, reason in plan.missed]
            if plan.missed_not_listed:
                log.warning(
                    "job %s: %d more missed fires not recorded", job.id, plan.missed_not_listed
                )
            executions = [self._new_run(comp, job, f, now) for f in fires]
            last = max([entry.scheduled_ms, *fires])
        if nxt is not None:
            due_next = nxt + jitter_offset_ms(job.id, nxt, job.jitter_ms)
            state = JobState(due_next if due_next != entry.due_ms else due_next + 1, nxt, last)
        else:
            state = JobState(0, 0, last)
        item = self.store.claim_fire(cached, entry, executions, state)
        return _Claim(entry, item, executions, state, missed)

    def _new_run(
        self, comp: _Compiled, job: job_pb2.Job, fire_ms: int, now: int
    ) -> execution_pb2.Execution:
        """The first attempt for one fire: at its jittered time, or now (catch-up) when late."""
        if now - fire_ms > self.config.grace_ms:
            return execution_from(comp.template, fire_ms, now, execution_pb2.TRIGGER_CATCH_UP)
        due = fire_ms + jitter_offset_ms(job.id, fire_ms, job.jitter_ms)
        return execution_from(comp.template, fire_ms, due, execution_pb2.TRIGGER_SCHEDULE)

    def _missed(
        self, job: job_pb2.Job, fire_ms: int, reason: str, now: int
    ) -> execution_pb2.Execution:
        ex = new_execution(job, self.partition, fire_ms, fire_ms, execution_pb2.TRIGGER_SCHEDULE)
        ex.state = execution_pb2.EXECUTION_MISSED
        ex.reason = reason
        ex.finished_ms = now
        return ex

    def _plan_run(self, entry: DueEntry, ex: execution_pb2.Execution | None) -> _Claim:
        if ex is None:
            return _Claim(entry, self.store.drop_due(entry), [])
        ex.state = execution_pb2.EXECUTION_PENDING
        ex.due_ms = entry.due_ms
        return _Claim(entry, self.store.rewrite_run(ex, consume=entry), [ex])

    def _claimed(self, claim: _Claim, rev: int) -> None:
        for ex in claim.executions:
            ex.fencing_token = rev
            self._arm(ex)
        if claim.missed:
            self.history.record(claim.missed)
            self.out.recorded(claim.missed)
        state = claim.next_state
        if state is None:
            return
        cached = self.jobs[claim.entry.job_id]
        self.jobs[claim.entry.job_id] = StoredJob(cached.job, cached.spec_revision, state, rev)
        if state.due_ms and state.due_ms <= self.window_end:
            nxt = DueEntry(
                self.partition, state.due_ms, claim.entry.job_id, FIRE, state.next_fire_ms, rev
            )
            self.due[(nxt.due_ms, nxt.job_id)] = nxt
            self._wake.set()

    # -- reconciling with API changes ---------------------------------------------------------

    async def reconcile(self, job_ids: Iterable[str]) -> None:
        """Re-reads these jobs from etcd and makes memory agree (after notify or a failed claim)."""
        ids = list(dict.fromkeys(job_ids))
        async with self._lock:
            views = await self.store.fetch_views(ids)
            wanted = set(ids)
            # A scan of the window: changes (update, pause, delete) are rare next to fires;
            # creations take the cheap path of :meth:`add_created`.
            for key in [k for k in self.due if k[1] in wanted]:
                del self.due[key]
            for job_id in ids:
                self._reconcile_one(job_id, views[job_id])
        self._wake.set()

    def add_created(self, entries: Sequence[DueEntry]) -> None:
        """First due entries of newly created jobs (from notify): nothing to reconcile."""
        for e in entries:
            if e.due_ms <= self.window_end:
                self.due.setdefault((e.due_ms, e.job_id), e)
        if len(entries) >= _FREEZE_AFTER:
            freeze_survivors()
        self._wake.set()

    def _reconcile_one(self, job_id: str, view: JobView) -> None:
        if view.cached is None:
            self.jobs.pop(job_id, None)
            self._compiled.pop(job_id, None)
        else:
            self.jobs[job_id] = view.cached
        for e in view.due:
            if e.due_ms <= self.window_end:
                self.due[(e.due_ms, e.job_id)] = e
        runs = {r.id: r for r in view.runs}
        for eid in [e for e, lv in self.live.items() if lv.ex.job_id == job_id]:
            current = runs.get(eid)
            if current is None or current.fencing_token != self.live[eid].ex.fencing_token:
                self.out.cancel_live(self, self.live.pop(eid), "removed by an API change")

    async def reload_window(self) -> None:
        """Re-reads the whole window (after a large batch of API changes or a compacted watch)."""
        now = self.clock.now_ms()
        entries, _ = await self.store.load_due(now + self.config.window_ms)
        async with self._lock:
            self.due.clear()
            for e in entries:
                self.due[(e.due_ms, e.job_id)] = e
            self.window_end = now + self.config.window_ms
            in_window = {e.job_id for e in entries}
            for j in [j for j in self.jobs if j in in_window]:
                self.jobs.pop(j, None)
        self._wake.set()

    # -- firing -----------------------------------------------------------------------------

    async def _on_timers(self, execution_ids: list[str]) -> None:
        lives = [self.live[e] for e in execution_ids if e in self.live]
        if lives:
            await self.out.fire(self, lives)

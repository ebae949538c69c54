"""The APScheduler 3 baseline of the e2e benchmark, one workload per process.

Run by ``e2e.py`` as ``python _e2e_aps.py KIND N SPREAD_S DURATION_S [JITTER_MS]``; prints
one JSON object (the result fields) as its last stdout line. The scheduler is what a Python
user gets by default: ``AsyncIOScheduler()`` with the memory job store, the asyncio executor
and the default job options (``misfire_grace_time=1``, ``coalesce=False``,
``max_instances=1``); the job function is a no-op coroutine that records ``time.time_ns()``
when it starts. Fires APScheduler dropped (past the 1 s grace, or skipped for max_instances)
are counted as ``lost``: it drops them with a log warning and nothing the application sees.
With JITTER_MS, spread jobs run at their second plus an offset in ``[0, JITTER_MS)`` and
sustained jobs are per-second interval jobs each at its own phase of the second: the same
shapes schedd gets from its jitter.
"""

from __future__ import annotations

import asyncio
import json
import math
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _e2e_common import fires_per_s, lateness_stats, spread_offset_ms
from apscheduler.events import (
    EVENT_JOB_EXECUTED,
    EVENT_JOB_MAX_INSTANCES,
    EVENT_JOB_MISSED,
)
from apscheduler.schedulers.asyncio import AsyncIOScheduler
from apscheduler.triggers.cron import CronTrigger
from apscheduler.triggers.date import DateTrigger
from apscheduler.triggers.interval import IntervalTrigger

from schedd.schedule import jitter_offset_ms

_MARGIN_S = 2.0
_DRAIN_TIMEOUT_S = 180.0


def _dt(ms: float) -> datetime:
    return datetime.fromtimestamp(ms / 1000.0, UTC)


async def _add_cost_s(samples: int = 2000) -> float:
    """Seconds per add_job on a running scheduler, measured on a throwaway one."""
    probe = AsyncIOScheduler()
    probe.start(paused=True)
    far = DateTrigger(run_date=datetime.now(UTC) + timedelta(hours=1))
    t0 = time.perf_counter()
    for i in range(samples):
        probe.add_job(_noop_probe, far, args=(i,))
    cost = (time.perf_counter() - t0) / samples
    probe.shutdown(wait=False)
    await asyncio.sleep(0)
    return cost


async def _noop_probe(i: int) -> None:
    return None


class Run:
    """One workload on one fresh scheduler."""

    def __init__(
        self, kind: str, n: int, spread_s: float, duration_s: int, jitter_ms: int = 0
    ) -> None:
        self.kind, self.n, self.spread_s, self.duration_s = kind, n, spread_s, duration_s
        self.jitter_ms = jitter_ms
        self.starts: list[tuple[int, int]] = []  # (job index, start ns)
        self.executed: dict[str, list[float]] = {}  # job id -> scheduled ms, in run order
        self.dropped = 0
        self.dropped_at: list[float] = []  # lateness (ms) at the moment a fire was dropped
        self.sched = AsyncIOScheduler()

    async def job(self, i: int) -> None:
        self.starts.append((i, time.time_ns()))

    def listen(self, event: Any) -> None:
        if event.code == EVENT_JOB_EXECUTED:
            self.executed.setdefault(event.job_id, []).append(
                event.scheduled_run_time.timestamp() * 1000.0
            )
        else:
            self.dropped += 1
            self.dropped_at.append(
                time.time() * 1000.0 - event.scheduled_run_time.timestamp() * 1000.0
            )

    async def run(self, add_s: float | None = None) -> dict[str, Any]:
        """Adds the jobs so they are due ``add_s`` from now (estimated when None), measures."""
        if add_s is None:
            # The memory store keeps a sorted list, so adding is superlinear: pad big runs more.
            factor = 1.5 if self.n <= 20_000 else 3.0
            add_s = await _add_cost_s() * self.n * factor + _MARGIN_S
        t_ms = math.ceil(time.time() + add_s) * 1000.0
        self.sched.start()
        mask = EVENT_JOB_MISSED | EVENT_JOB_MAX_INSTANCES
        self.sched.add_listener(
            self.listen, mask | EVENT_JOB_EXECUTED if self.kind == "sustained" else mask
        )
        t0 = time.time()
        ids = self._add_jobs(t_ms)
        added_at = time.time()
        overran = added_at * 1000.0 > t_ms - 200
        if self.kind == "sustained":
            out = await self._measure_sustained(ids, added_at)
        else:
            out = await self._measure_once(t_ms)
        out["add_s"] = round(added_at - t0, 2)
        out["add_overran_t"] = overran
        self.sched.shutdown(wait=False)
        return out

    def _add_jobs(self, t_ms: float) -> list[str]:
        ids = []
        for i in range(self.n):
            if self.kind == "burst":
                trigger: Any = DateTrigger(run_date=_dt(t_ms))
            elif self.kind == "spread":
                trigger = DateTrigger(run_date=_dt(t_ms + self._offset_ms(i)))
            elif self.jitter_ms:
                # Per-second jobs, each at its own millisecond of the second (as schedd's jitter).
                phase = jitter_offset_ms(f"aps-{i}", 0, self.jitter_ms)
                trigger = IntervalTrigger(
                    seconds=1, start_date=_dt(math.floor(t_ms / 1000.0) * 1000.0 + phase)
                )
            else:
                trigger = CronTrigger(second="*", timezone=UTC)
            ids.append(self.sched.add_job(self.job, trigger, args=(i,)).id)
        return ids

    def _offset_ms(self, i: int) -> float:
        """Job i of a spread: its second after T, plus its offset inside that second."""
        second = spread_offset_ms(i, self.n, self.spread_s)
        return second + jitter_offset_ms(f"aps-{i}", int(second), self.jitter_ms)

    async def _measure_once(self, t_ms: float) -> dict[str, Any]:
        deadline = (
            time.monotonic() + (t_ms / 1000.0 - time.time()) + self.spread_s + _DRAIN_TIMEOUT_S
        )
        executor = self.sched._lookup_executor("default")
        while time.monotonic() < deadline:
            await asyncio.sleep(0.2)
            if (
                time.time() * 1000.0 > t_ms + self.spread_s * 1000
                and not self.sched.get_jobs()
                and not executor._pending_futures
            ):
                break
        spread = self.kind == "spread"
        late = [ns / 1e6 - t_ms - (self._offset_ms(i) if spread else 0.0) for i, ns in self.starts]
        seen = len({i for i, _ in self.starts})
        out: dict[str, Any] = dict(lateness_stats(late))
        out["fires_per_s"] = fires_per_s(
            [ns / 1e6 for _, ns in self.starts], t_ms, self.kind, self.n
        )
        out["lost"] = self.n - seen
        out["dup"] = len(self.starts) - seen
        out["dropped_events"] = self.dropped
        # Lateness counting each dropped fire at the instant APScheduler dropped it (a lower
        # bound of when it would have run): comparable even when most fires were dropped.
        both = lateness_stats(late + self.dropped_at)
        out["p99_incl_dropped_ms"] = both["p99_ms"]
        return out

    async def _measure_sustained(self, ids: list[str], added_at: float) -> dict[str, Any]:
        start_ms = (math.floor(added_at) + 3) * 1000.0  # a couple of warm-up seconds first
        end_ms = start_ms + self.duration_s * 1000.0
        await asyncio.sleep(max(0.0, end_ms / 1000.0 - time.time() + 3.0))  # > the 1 s grace
        self.sched.pause()
        by_job: dict[int, list[int]] = {}
        for i, ns in self.starts:
            by_job.setdefault(i, []).append(ns)
        late, starts_ms = [], []
        for i, job_id in enumerate(ids):
            for sched_ms, ns in zip(self.executed.get(job_id, []), by_job.get(i, []), strict=False):
                if start_ms <= sched_ms < end_ms:
                    late.append(ns / 1e6 - sched_ms)
                    starts_ms.append(ns / 1e6)
        out: dict[str, Any] = dict(lateness_stats(late))
        out["fires_per_s"] = fires_per_s(starts_ms, start_ms, "sustained", self.n, self.duration_s)
        out["lost"] = self.n * self.duration_s - len(late)
        out["dropped_events"] = self.dropped
        return out


def main() -> None:
    kind, n, spread_s, duration_s, jitter_ms = (
        sys.argv[1],
        int(sys.argv[2]),
        float(sys.argv[3]),
        int(sys.argv[4]),
        int(sys.argv[5]) if len(sys.argv) > 5 else 0,
    )
    out = asyncio.run(Run(kind, n, spread_s, duration_s, jitter_ms).run())
    if out["add_overran_t"]:
        # Adding n jobs to the memory store is superlinear (a sorted list); redo the run with
        # T placed after the add time just measured, in a fresh scheduler.
        out = asyncio.run(
            Run(kind, n, spread_s, duration_s, jitter_ms).run(out["add_s"] * 1.3 + _MARGIN_S)
        )
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()

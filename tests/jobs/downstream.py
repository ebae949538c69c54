"""The world outside as a fault: targets that fail for a while, and what must hold afterwards.

A :class:`Outage` is a loopback HTTP target that answers 200 except inside its outage window,
where it fails in one way (503, too slow for the job's timeout, 429 with ``Retry-After`` in
seconds or as an HTTP date); it keeps every answer it gave, keyed by the execution id that
the worker sends as ``Idempotency-Key``. :func:`check_fires_ended_once` pauses the jobs,
waits until nothing of them is live, and checks every fire against the target's answers (or
a handler's effect ledger): each fire ended exactly once, SUCCEEDED (one 2xx, nothing sent
after it) or DEAD by its policy (no 2xx), every second from the first fire to the pause.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

from aiohttp import web
from jobs.conftest import KindsCluster, Seen

from integration.cluster_harness import eventually
from schedd.v1 import execution_pb2

SUCCEEDED, DEAD = execution_pb2.EXECUTION_SUCCEEDED, execution_pb2.EXECUTION_DEAD
LIVE = (
    execution_pb2.EXECUTION_PENDING,
    execution_pb2.EXECUTION_DISPATCHED,
    execution_pb2.EXECUTION_RUNNING,
    execution_pb2.EXECUTION_RETRY_WAIT,
)


@dataclass(frozen=True)
class Answer:
    at: float  # when the request arrived
    answered: float
    status: int
    token: int


@dataclass
class Outage:
    """Fails ``how`` from ``start`` (time.time()) for ``seconds``, 200 before and after.

    ``how``: ``"503"``, ``"slow"`` (waits ``slow_s``, then 503: the attempt timed out on the
    worker and failed here too), ``"429s"`` (``Retry-After: 2``), ``"429date"``
    (``Retry-After`` as an HTTP date 3 s ahead: every request answered in one second is told
    the same instant).
    """

    how: str
    start: float = 0.0
    seconds: float = 12.0
    slow_s: float = 2.5
    answers: dict[str, list[Answer]] = field(default_factory=lambda: defaultdict(list))

    def down(self, at: float) -> bool:
        return self.start <= at < self.start + self.seconds

    @property
    def healed_at(self) -> float:
        return self.start + self.seconds

    async def respond(self, request: web.Request, seen: Seen) -> web.StreamResponse:
        execution = request.headers.get("Idempotency-Key", "")
        token = int(request.headers.get("X-Schedd-Fencing-Token", "0"))
        status, headers = 200, {}
        if self.down(seen.at):
            status = 503
            if self.how == "slow":
                await asyncio.sleep(self.slow_s)
            elif self.how == "429s":
                status, headers = 429, {"Retry-After": "2"}
            elif self.how == "429date":
                later = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=3)
                status, headers = 429, {"Retry-After": format_datetime(later, usegmt=True)}
        self.answers[execution].append(Answer(seen.at, time.time(), status, token))
        return web.Response(status=status, headers=headers, text="ok" if status == 200 else "no")


@dataclass
class Effects:
    """What the target saw of each execution: its 2xx answers, and the requests that arrived
    after the first was answered (a request that arrived before it and was answered later,
    an attempt that had timed out on the worker, does not count)."""

    ok: dict[str, int] = field(default_factory=dict)  # execution -> 2xx answers
    after_ok: dict[str, int] = field(default_factory=dict)  # execution -> requests after

    @staticmethod
    def from_answers(answers: dict[str, list[Answer]]) -> Effects:
        eff = Effects()
        for execution, got in answers.items():
            oks = [a for a in got if a.status == 200]
            eff.ok[execution] = len(oks)
            if oks:
                eff.after_ok[execution] = sum(1 for a in got if a.at > oks[0].answered)
        return eff


@dataclass
class Verdict:
    fires: int = 0
    succeeded: int = 0
    dead: int = 0
    problems: list[str] = field(default_factory=list)

    def fail(self, what: str) -> None:
        if len(self.problems) < 40:
            self.problems.append(what)


async def pause_all(c: KindsCluster, job_ids: Iterable[str]) -> int:
    """Pauses the jobs; returns when (ms) the last pause was answered."""
    for job_id in job_ids:
        await c.client.pause_job(job_id)
    return time.time_ns() // 1_000_000


async def wait_none_live(c: KindsCluster, timeout: float = 60) -> None:
    await eventually(
        lambda: c.client.list_executions(states=LIVE, limit=1000),
        lambda live: len(live) == 0,
        timeout=timeout,
        interval=0.5,
        what="every execution to have ended",
    )


async def check_fires_ended_once(
    c: KindsCluster,
    job_ids: list[str],
    effects: Callable[[], Effects],
    *,
    paused_ms: int,
    may_die: Iterable[str] = (),
) -> Verdict:
    """Every fire of each job, from its first to the pause, ended exactly once (see the
    module docstring); ``effects`` is read once nothing is live; ``may_die``: jobs whose
    fires may also end DEAD (few attempts)."""
    await wait_none_live(c)
    seen = effects()
    dying = set(may_die)
    v = Verdict()
    for job_id in job_ids:
        runs = await c.runs(job_id)
        by_fire = defaultdict(list)
        for r in runs:
            by_fire[r.scheduled_ms].append(r)
        if not by_fire:
            v.fail(f"{job_id}: no fire at all")
            continue
        first, last = min(by_fire), max(by_fire)
        if last < paused_ms - 2500:
            v.fail(f"{job_id}: the last fire {last} is {paused_ms - last} ms before the pause")
        for t in range(first, last + 1, 1000):
            v.fires += 1
            got = by_fire.get(t, [])
            if len(got) != 1:
                v.fail(f"{job_id}@{t}: {len(got)} executions")
                continue
            _check_one(v, got[0], seen, job_id in dying)
    return v


def _check_one(v: Verdict, r: execution_pb2.Execution, effects: Effects, may_die: bool) -> None:
    ok = effects.ok.get(r.id, 0)
    if r.state == SUCCEEDED:
        v.succeeded += 1
        if ok != 1:
            v.fail(f"{r.id}: SUCCEEDED with {ok} effects")
        if effects.after_ok.get(r.id, 0):
            v.fail(f"{r.id}: ran {effects.after_ok[r.id]} more times after its effect")
    elif r.state == DEAD and may_die:
        v.dead += 1
        if ok:
            v.fail(f"{r.id}: DEAD, yet {ok} effects")
    else:
        state = execution_pb2.ExecutionState.Name(r.state)
        v.fail(f"{r.id}: ended {state} after {r.attempt} attempts ({r.error or r.reason})")


def log_lines(c: KindsCluster, needle: str) -> int:
    """How many lines of every process's log contain ``needle``."""
    count = 0
    for p in c.procs:
        with contextlib.suppress(FileNotFoundError):
            count += p.log.read_text(errors="replace").count(needle)
    return count

"""Downstream faults with real processes: targets and handlers that fail for a while.

Two ``schedd node`` processes and two ``schedd worker`` processes on the session's etcd run
per-second jobs against loopback targets that go down and come back (503 with the breaker
opening and closing, answers slower than the job's timeout, 429 with ``Retry-After`` in
seconds and as an HTTP date) and Python handlers that raise for a while. Many executions of
one host are told to retry at one instant (the breaker's cool-down, a ``Retry-After`` date):
their retry timers must not share a key, nor a settle batch fail because of them. Each test
then checks every fire: it ended exactly once, SUCCEEDED with one effect and nothing sent
after it, or DEAD by its policy; none is left live; no result was refused as malformed.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import time
from pathlib import Path

import pytest
from cluster.effects import EffectLedger
from jobs.conftest import KindsCluster
from jobs.downstream import Effects, Outage, check_fires_ended_once, log_lines, pause_all

from integration.cluster_harness import eventually

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

EVERY_SECOND = "* * * * * *"
#: Retry knobs of the issue's scenario: many attempts, 1 s first backoff, at most 2 s.
RETRY = {"max_attempts": 100, "retry_initial": "1s", "retry_max": "2s"}


async def _two_of_each(
    c: KindsCluster, *worker_args: str, env: dict[str, str] | None = None
) -> None:
    """n0 and w0 (started and ready), then n1 and w1 connected to both, ownership settled."""
    await c.start(*worker_args, env=env)
    _, n1 = c.add_node("n1")
    c.add_worker("w1", "--connect", f"{c.address},{n1}", *worker_args, env=env)

    async def settled() -> bool:
        st = await c.client.cluster_status()
        owners = {p.owner for p in st.partitions}
        return len(st.workers) == 2 and owners == {"n0", "n1"}

    await eventually(settled, bool, timeout=30, interval=0.3, what="2 nodes and 2 workers")


def _no_malformed_writes(c: KindsCluster) -> None:
    assert log_lines(c, "duplicate key") == 0, c.logs()
    assert log_lines(c, "refused on its own") == 0, c.logs()


async def test_a_target_down_then_healed_ends_every_fire_once(kinds_etcd: KindsCluster) -> None:
    """The issue's scenario: 20 per-second HTTP jobs on one host that answers 503 for a while
    (the breaker opens, refuses, half-opens, opens again), then heals; and two jobs of few
    attempts whose fires in the outage go to the dead letters."""
    outage = Outage("503", seconds=12)
    target = await kinds_etcd.target(outage.respond)
    await _two_of_each(kinds_etcd, "--http-breaker-cooldown", "3")
    outage.start = time.time() + 3
    jobs = [
        (await kinds_etcd.client.create_job(
            f"hook-{i}", schedule=EVERY_SECOND, http=target.url(f"/hook/{i}"),
            misfire="catch_up", catch_up_limit=1000, **RETRY,
        )).job.id
        for i in range(20)
    ]  # fmt: skip
    dying = [
        (await kinds_etcd.client.create_job(
            f"fragile-{i}", schedule=EVERY_SECOND, http=target.url(f"/fragile/{i}"),
            misfire="catch_up", catch_up_limit=1000, max_attempts=2, retry_initial="1s",
        )).job.id
        for i in range(2)
    ]  # fmt: skip
    await asyncio.sleep(outage.healed_at + 6 - time.time())
    paused = await pause_all(kinds_etcd, jobs + dying)
    verdict = await check_fires_ended_once(
        kinds_etcd,
        jobs + dying,
        lambda: Effects.from_answers(outage.answers),
        paused_ms=paused,
        may_die=dying,
    )
    answered = sum(len(a) for a in outage.answers.values())
    in_outage = sum(1 for a in outage.answers.values() for x in a if outage.down(x.at))
    print(
        f"503 outage: fires {verdict.fires}, succeeded {verdict.succeeded}, dead {verdict.dead}, "
        f"requests {answered} ({in_outage} in the {outage.seconds:.0f} s outage), "
        f"results refused {log_lines(kinds_etcd, 'node refused result')}"
    )
    assert not verdict.problems, "\n".join(verdict.problems)
    assert verdict.dead > 0  # the fragile jobs' fires in the outage ran out of attempts
    # The breaker kept the outage's load down: far fewer requests than attempts due.
    assert in_outage < 22 * outage.seconds
    _no_malformed_writes(kinds_etcd)


async def test_timeouts_and_retry_after_end_every_fire_once(kinds_etcd: KindsCluster) -> None:
    """Three hosts fail three ways for a while: too slow for the job's timeout, 429 with
    ``Retry-After: 2``, 429 with ``Retry-After`` as an HTTP date (one instant for every
    request answered in one second). The breaker stays out of it (a high threshold), so each
    failed attempt is retried by the node at the instant the target named."""
    outages = [
        Outage("slow", seconds=10),
        Outage("429s", seconds=10),
        Outage("429date", seconds=10),
    ]
    targets = [await kinds_etcd.target(o.respond) for o in outages]
    await _two_of_each(kinds_etcd, "--http-breaker-failures", "1000")
    start = time.time() + 3
    jobs: dict[str, list[str]] = {}
    for outage, target in zip(outages, targets, strict=True):
        outage.start = start
        jobs[outage.how] = [
            (await kinds_etcd.client.create_job(
                f"{outage.how}-{i}", schedule=EVERY_SECOND, http=target.url(f"/{i}"),
                misfire="catch_up", catch_up_limit=1000, timeout="1s", **RETRY,
            )).job.id
            for i in range(6)
        ]  # fmt: skip
    await asyncio.sleep(start + 10 + 6 - time.time())
    paused = await pause_all(kinds_etcd, [j for ids in jobs.values() for j in ids])
    for outage in outages:
        effects = functools.partial(Effects.from_answers, outage.answers)
        verdict = await check_fires_ended_once(
            kinds_etcd, jobs[outage.how], effects, paused_ms=paused
        )
        waited = [
            b.at - a.at
            for got in outage.answers.values()
            for a, b in itertools.pairwise(got)
            if a.status == 429
        ]
        print(
            f"{outage.how}: fires {verdict.fires}, succeeded {verdict.succeeded}, requests "
            f"{sum(len(a) for a in outage.answers.values())}, shortest wait after a 429 "
            f"{min(waited, default=0):.2f} s"
        )
        assert not verdict.problems, f"{outage.how}:\n" + "\n".join(verdict.problems)
        if outage.how != "slow":  # the target's word is honoured (up to the max backoff)
            assert min(waited) >= 1.9, waited
    _no_malformed_writes(kinds_etcd)


async def test_handlers_raising_for_a_while_end_every_fire_once(
    kinds_etcd: KindsCluster, tmp_path: Path
) -> None:
    """Python handlers whose downstream is out for a while raise; every fire still takes
    effect exactly once through the fenced sink, and nothing runs after its effect."""
    down, db = tmp_path / "down", tmp_path / "effects.db"
    env = {"SCHEDD_EFFECTS_DB": str(db)}
    await _two_of_each(kinds_etcd, "--import", "jobs.flaky_handlers", env=env)
    jobs = [
        (await kinds_etcd.client.create_job(
            f"flaky-{i}", schedule=EVERY_SECOND, handler="flaky",
            payload={"down_file": str(down)}, misfire="catch_up", catch_up_limit=1000, **RETRY,
        )).job.id
        for i in range(12)
    ]  # fmt: skip
    await asyncio.sleep(3)
    down.touch()
    await asyncio.sleep(10)
    down.unlink()
    await asyncio.sleep(6)
    paused = await pause_all(kinds_etcd, jobs)
    ledger = EffectLedger(db)
    try:
        verdict = await check_fires_ended_once(
            kinds_etcd, jobs, lambda: _ledger_effects(ledger), paused_ms=paused
        )
        attempts = len(ledger.attempts())
    finally:
        ledger.close()
    print(
        f"raising handlers: fires {verdict.fires}, succeeded {verdict.succeeded}, attempts "
        f"{attempts}, results refused {log_lines(kinds_etcd, 'node refused result')}"
    )
    assert not verdict.problems, "\n".join(verdict.problems)
    assert attempts > verdict.fires  # the outage made them retry
    _no_malformed_writes(kinds_etcd)


def _ledger_effects(ledger: EffectLedger) -> Effects:
    """The ledger's accepted writes as effects, and the attempts started after each."""
    eff = Effects()
    first_ok: dict[str, int] = {}
    for w in ledger.writes():
        if w.accepted:
            execution = f"{w.job_id}@{w.scheduled_ms}"
            eff.ok[execution] = eff.ok.get(execution, 0) + 1
            first_ok.setdefault(execution, w.at_ms)
    for a in ledger.attempts():
        at = first_ok.get(a.execution_id)
        if at is not None and a.started_ms > at:
            eff.after_ok[a.execution_id] = eff.after_ok.get(a.execution_id, 0) + 1
    return eff

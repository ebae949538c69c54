"""The whole path of a job on one node: create -> claim -> fire -> worker -> durable result."""

from __future__ import annotations

import asyncio
import itertools
import json

import pytest

from integration.cluster_harness import SUCCEEDED, Harness, eventually
from schedd import AlreadyExists, InvalidArgument, NotFound
from schedd.store import EtcdKV, prefix_end
from schedd.v1 import execution_pb2

pytestmark = pytest.mark.timeout(90)


def _succeeded(runs: list[execution_pb2.Execution]) -> list[execution_pb2.Execution]:
    return [r for r in runs if r.state == SUCCEEDED]


async def test_create_fire_run_succeeded_with_token(h: Harness) -> None:
    await h.start_node()
    await h.start_worker()
    client = await h.connect()
    created = await client.create_job(
        "hello", schedule="@after 1s", handler="echo", payload={"x": 1}
    )
    assert created.created and created.job.id
    runs = await eventually(
        lambda: h.runs(created.job.id), lambda rs: len(_succeeded(rs)) == 1, what="one success"
    )
    (run,) = runs
    assert run.attempt == 1
    assert run.fencing_token > 0
    assert run.scheduled_ms == created.job.created_ms + 1000
    assert json.loads(run.result) == {"x": 1}
    assert h.calls["echo"][0][1] == run.fencing_token


async def test_six_field_cron_fires_every_second_exactly_once(h: Harness) -> None:
    await h.start_node()
    await h.start_worker()
    client = await h.connect()
    job = (await client.create_job("tick", schedule="* * * * * *", handler="echo")).job
    runs = await eventually(
        lambda: h.runs(job.id), lambda rs: len(_succeeded(rs)) >= 4, timeout=20, what="4 ticks"
    )
    times = sorted(r.scheduled_ms for r in _succeeded(runs))
    assert all(t % 1000 == 0 for t in times)
    assert all(b - a == 1000 for a, b in itertools.pairwise(times))
    ids = [c[0] for c in h.calls["echo"]]
    assert len(ids) == len(set(ids)), "a fire ran twice"
    started = {r.id: r.started_ms - r.scheduled_ms for r in _succeeded(runs)}
    assert max(started.values()) < 500, f"fires started late: {started}"


async def test_pause_resume_trigger_delete(h: Harness) -> None:
    await h.start_node()
    await h.start_worker()
    client = await h.connect()
    job = (await client.create_job("p", schedule="* * * * * *", handler="echo")).job
    await eventually(lambda: h.runs(job.id), lambda rs: len(_succeeded(rs)) >= 1)
    paused = await client.pause_job(job.id)
    assert paused.paused and paused.next_fire_ms == 0
    await asyncio.sleep(1.2)  # let a fire that was already on a worker finish
    before = len(_succeeded(await h.runs(job.id)))
    await asyncio.sleep(2.0)
    assert len(_succeeded(await h.runs(job.id))) == before, "a paused job fired"
    ex = await client.trigger_job(job.id, payload={"manual": True})
    assert ex.trigger == execution_pb2.TRIGGER_MANUAL
    await eventually(
        lambda: client.get_execution(ex.id), lambda e: e.state == SUCCEEDED, what="manual run"
    )
    resumed = await client.resume_job(job.id)
    assert not resumed.paused and resumed.next_fire_ms > 0
    await eventually(lambda: h.runs(job.id), lambda rs: len(_succeeded(rs)) >= before + 2)
    await client.delete_job(job.id)
    with pytest.raises(NotFound):
        await client.get_job(job.id)
    await asyncio.sleep(1.2)
    count = len(h.calls["echo"])
    await asyncio.sleep(2.0)
    assert len(h.calls["echo"]) == count, "a deleted job fired"


async def test_idempotent_create(h: Harness) -> None:
    await h.start_node()
    client = await h.connect()
    a = await client.create_job("i", schedule="0 9 * * *", handler="echo", idempotency_key="k1")
    b = await client.create_job("i", schedule="0 9 * * *", handler="echo", idempotency_key="k1")
    assert a.created and not b.created
    assert a.job.id == b.job.id
    with pytest.raises(AlreadyExists):
        await client.create_job("i", schedule="0 10 * * *", handler="echo", idempotency_key="k1")
    jobs = [j async for j in client.list_jobs()]
    assert [j.id for j in jobs] == [a.job.id]


async def test_retries_then_dead_letter_then_redrive(h: Harness) -> None:
    await h.start_node()
    await h.start_worker()
    client = await h.connect()
    job = (
        await client.create_job("doomed", schedule="@after 1s", handler="fail", max_attempts=3)
    ).job
    dead = await eventually(
        lambda: client.list_dead_letters(job_id=job.id),
        lambda d: len(list(d)) == 1,
        timeout=30,
        what="a dead letter",
    )
    (ex,) = list(dead)
    assert ex.state == execution_pb2.EXECUTION_DEAD
    assert ex.attempt == 3
    attempts = [c[2] for c in h.calls["fail"]]
    assert attempts == [1, 2, 3]
    tokens = [c[1] for c in h.calls["fail"]]
    assert tokens == sorted(tokens) and len(set(tokens)) == 3
    redriven = await client.redrive(execution_ids=[ex.id])
    assert len(list(redriven)) == 1
    await eventually(lambda: asyncio.sleep(0, result=len(h.calls["fail"])), lambda n: n >= 4)


async def test_bad_input_is_rejected_and_writes_nothing(h: Harness, etcd: EtcdKV) -> None:
    await h.start_node()
    client = await h.connect()
    start = h.prefix + b"jobs/"
    cases = [
        dict(schedule="not a cron", handler="echo"),
        dict(schedule="0 0 30 2 *", handler="echo"),
        dict(schedule="* * * * *", tz="Mars/Olympus", handler="echo"),
        dict(schedule="* * * * *", handler=""),
        dict(schedule="* * * * *", handler="echo", payload=b"x" * (256 * 1024 + 1)),
        dict(schedule="@every 500ms", handler="echo"),
    ]
    for case in cases:
        with pytest.raises(InvalidArgument) as info:
            await client.create_job("bad", **case)  # type: ignore[arg-type]
        assert info.value.field, f"no field named for {case}"
    with pytest.raises(InvalidArgument):
        await client.create_job("a/b", schedule="* * * * *", handler="echo")
    with pytest.raises(NotFound):
        await client.get_job("nope")
    with pytest.raises(InvalidArgument):
        await client.get_job("")
    assert await etcd.count(start, prefix_end(start)) == 0


async def test_update_while_firing_takes_effect(h: Harness) -> None:
    await h.start_node()
    await h.start_worker()
    client = await h.connect()
    job = (
        await client.create_job("u", schedule="* * * * * *", handler="echo", payload={"v": 1})
    ).job
    await eventually(lambda: h.runs(job.id), lambda rs: len(_succeeded(rs)) >= 2)
    updated = await client.update_job(job.id, schedule="*/3 * * * * *", payload={"v": 2})
    assert updated.schedule.expr == "*/3 * * * * *"
    assert updated.version > job.version
    changed_at = h.nodes[0].clock.now_ms() + 1500  # fires already on a worker may finish

    def after(rs: list[execution_pb2.Execution]) -> list[execution_pb2.Execution]:
        return [r for r in _succeeded(rs) if r.scheduled_ms > changed_at]

    runs = await eventually(lambda: h.runs(job.id), lambda rs: len(after(rs)) >= 2, timeout=20)
    assert all(r.scheduled_ms % 3000 == 0 for r in after(runs)), [
        r.scheduled_ms for r in after(runs)
    ]
    assert all(json.loads(r.result) == {"v": 2} for r in after(runs)), [
        r.result for r in after(runs)
    ]


async def test_overlap_forbid_skips_and_replace_cancels(h: Harness) -> None:
    await h.start_node()
    await h.start_worker()
    client = await h.connect()
    forbid = (
        await client.create_job(
            "f", schedule="* * * * * *", handler="slow", payload={"seconds": 2.5}, overlap="forbid"
        )
    ).job
    replace = (
        await client.create_job(
            "r",
            schedule="*/2 * * * * *",
            handler="slow",
            payload={"seconds": 30},
            overlap="replace",
        )
    ).job
    skipped = await eventually(
        lambda: h.runs(forbid.id),
        lambda rs: len([r for r in rs if r.state == execution_pb2.EXECUTION_SKIPPED]) >= 2,
        timeout=20,
        what="skipped fires",
    )
    assert all("overlap" in r.reason for r in skipped if r.state == execution_pb2.EXECUTION_SKIPPED)
    cancelled = await eventually(
        lambda: h.runs(replace.id),
        lambda rs: any(r.state == execution_pb2.EXECUTION_CANCELLED for r in rs),
        timeout=20,
        what="a replaced run",
    )
    running = [r for r in cancelled if r.state == execution_pb2.EXECUTION_RUNNING]
    assert len(running) <= 1

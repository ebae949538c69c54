"""Jobs that run after other jobs, through a real node and worker on etcd and on the embedded
store: a chain, a fan-out and a fan-in run each child once per root fire, after all its
parents; a parent that ends DEAD leaves its children SKIPPED with the reason, and its redrive
carries on to them; parents of different roots and cycles are refused, naming the jobs."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from schedd import FailedPrecondition, InvalidArgument, NotFound
from schedd.v1 import execution_pb2, job_pb2
from tests.integration.cluster_harness import Harness, eventually

pytestmark = pytest.mark.timeout(120)

DONE = execution_pb2.EXECUTION_SUCCEEDED
SKIPPED = execution_pb2.EXECUTION_SKIPPED


def _job(name: str, *, after: tuple[str, ...] = (), handler: str = "echo") -> job_pb2.Job:
    job = job_pb2.Job(name=name, handler=job_pb2.HandlerTarget(name=handler))
    job.retry.max_attempts = 1
    if after:
        job.after.extend(after)
    else:
        job.schedule.expr = "@every 1h"
    return job


async def _state(h: Harness, job_id: str, fire_ms: int) -> int:
    runs = await h.runs(job_id)
    return next((r.state for r in runs if r.scheduled_ms == fire_ms), 0)


async def test_chain_fan_out_and_fan_in_run_each_child_once_after_its_parents(
    h_store: Harness,
) -> None:
    await h_store.start_node()
    await h_store.start_worker()
    c = await h_store.connect()
    root = (await c.create(_job("root"))).job
    b = (await c.create(_job("b", after=("root",)))).job  # by name
    chain = (await c.create(_job("c", after=(b.id,)))).job  # by id
    fan = [(await c.create(_job(f"f{i}", after=("root",)))).job for i in range(3)]
    joined = (await c.create(_job("join", after=tuple(f.name for f in fan)))).job
    assert list(joined.after) == [f.id for f in fan] and not joined.schedule.expr
    assert sorted((await c.get_job(root.id)).children) == sorted([b.id, *(f.id for f in fan)])
    fire = (await c.trigger_job(root.id)).scheduled_ms
    every = [root, b, chain, *fan, joined]
    for job in every:
        await eventually(
            lambda j=job: _state(h_store, j.id, fire), lambda s: s == DONE,
            what=f"{job.name}@{fire} to succeed", timeout=20,
        )  # fmt: skip
    calls = [eid for eid, _, _ in h_store.calls["echo"]]
    assert sorted(calls) == sorted(f"{j.id}@{fire}" for j in every)  # each once
    runs = {j.name: next(r for r in await h_store.runs(j.id)) for j in every}
    assert runs["c"].started_ms >= runs["b"].finished_ms >= runs["root"].started_ms
    assert runs["join"].started_ms >= max(runs[f.name].finished_ms for f in fan)
    assert runs["join"].trigger == execution_pb2.TRIGGER_DEPENDENCY


async def test_a_dead_parent_skips_its_children_and_its_redrive_carries_on(
    h_store: Harness,
) -> None:
    await h_store.start_node()
    failing = [True]
    w = h_store.new_worker()

    @w.handler("flaky")
    def flaky(ctx: Any, payload: Any) -> str:
        if failing[0]:
            raise RuntimeError("the export target is down")
        return "ok"

    h_store.workers.append((w, asyncio.create_task(w.run())))
    c = await h_store.connect()
    root = (await c.create(_job("root", handler="flaky"))).job
    child = (await c.create(_job("child", after=(root.id,)))).job
    grandchild = (await c.create(_job("grandchild", after=(child.id,)))).job
    fire = (await c.trigger_job(root.id)).scheduled_ms
    for job in (child, grandchild):
        await eventually(
            lambda j=job: _state(h_store, j.id, fire), lambda s: s == SKIPPED,
            what=f"{job.name} skipped", timeout=20,
        )  # fmt: skip
    [skipped] = [r for r in await h_store.runs(child.id) if r.scheduled_ms == fire]
    assert f"{root.id} ended DEAD" in skipped.reason and "export target" in skipped.reason
    [told] = [r for r in await h_store.runs(grandchild.id) if r.scheduled_ms == fire]
    assert f"{child.id} skipped" in told.reason
    failing[0] = False  # the target is back: redrive the parent, its children go after all
    await c.redrive([f"{root.id}@{fire}"])
    for job in (root, child, grandchild):
        await eventually(
            lambda j=job: _state(h_store, j.id, fire), lambda s: s == DONE,
            what=f"{job.name} to run after the redrive", timeout=20,
        )  # fmt: skip
    ran = sorted(e for e, _, _ in h_store.calls["echo"])
    assert ran == sorted([f"{child.id}@{fire}", f"{grandchild.id}@{fire}"])  # each once


async def test_roots_cycles_and_deletes_are_checked(h_store: Harness) -> None:
    await h_store.start_node()
    c = await h_store.connect()
    a = (await c.create(_job("a"))).job
    z = (await c.create(_job("z"))).job
    a1 = (await c.create(_job("a1", after=(a.id,)))).job
    z1 = (await c.create(_job("z1", after=(z.id,)))).job
    with pytest.raises(InvalidArgument, match="different roots"):
        await c.create(_job("mixed", after=(a1.id, z1.id)))
    with pytest.raises(NotFound, match=r"job\.after\[0\]"):
        await c.create(_job("orphan", after=("nope",)))
    with pytest.raises(InvalidArgument, match="no schedule"):
        bad = _job("both", after=(a.id,))
        bad.schedule.expr = "@every 1m"
        await c.create(bad)
    a2 = (await c.create(_job("a2", after=(a1.id,)))).job
    with pytest.raises(InvalidArgument, match="cycle"):
        await _set_after(c, a1.id, [a2.id])
    with pytest.raises(FailedPrecondition, match="run after it"):
        await c.delete_job(a1.id)
    await c.delete_job(a2.id)
    assert not (await c.get_job(a1.id)).children
    await c.delete_job(a1.id)


async def _set_after(c: object, job_id: str, after: list[str]) -> None:
    from schedd.v1 import scheduler_pb2

    patch = job_pb2.Job(id=job_id, after=after)
    req = scheduler_pb2.UpdateJobRequest(job=patch, update_paths=["after"])
    await c._call(c._stub.UpdateJob, req)  # type: ignore[attr-defined]


async def test_skipped_cancelled_parents_and_a_paused_child_leave_it_skipped(
    h_embedded: Harness,
) -> None:
    h = h_embedded
    await h.start_node()
    await h.start_worker()
    c = await h.connect()
    slow = _job("slow-root", handler="slow")
    slow.overlap = job_pb2.OVERLAP_FORBID
    slow.payload = b'{"seconds": 3}'
    root = (await c.create(slow)).job
    child = (await c.create(_job("child", after=(root.id,)))).job
    first = (await c.trigger_job(root.id)).scheduled_ms
    await eventually(
        lambda: _state(h, root.id, first), lambda s: s == execution_pb2.EXECUTION_RUNNING,
        what="the first root run to start",
    )  # fmt: skip
    second = (await c.trigger_job(root.id)).scheduled_ms  # overlap FORBID: SKIPPED
    await eventually(
        lambda: _state(h, child.id, second), lambda s: s == SKIPPED, what="child of the skip"
    )
    await c.cancel_execution(f"{root.id}@{first}", reason="operator")
    await eventually(
        lambda: _state(h, child.id, first), lambda s: s == SKIPPED, what="child of the cancel"
    )
    reasons = {r.scheduled_ms: r.reason for r in await h.runs(child.id)}
    assert "ended SKIPPED" in reasons[second] and "ended CANCELLED" in reasons[first]
    await c.pause_job(child.id)
    fast = (await c.create(_job("fast-root"))).job
    paused = (await c.create(_job("paused-child", after=(fast.id,)))).job
    await c.pause_job(paused.id)
    third = (await c.trigger_job(fast.id)).scheduled_ms
    await eventually(
        lambda: _state(h, paused.id, third), lambda s: s == SKIPPED, what="the paused child"
    )
    assert "is paused" in next(r.reason for r in await h.runs(paused.id))
    assert "echo" not in h.calls or all(not e.startswith(paused.id) for e, _, _ in h.calls["echo"])

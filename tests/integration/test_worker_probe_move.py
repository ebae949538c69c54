"""A takeover probe reaches a worker whose old node has just cancelled the execution (its
token looked stale there once the partition moved): the running attempt is adopted by the new
node under the new token, its result goes there, and nothing runs a second time."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from integration.test_worker_stream import Node, NodeFactory, make_node, wait_for
from schedd.v1 import worker_pb2
from schedd.worker import Context, Worker

__all__ = ["make_node"]  # fixtures, used by name


async def test_a_probe_adopts_an_attempt_its_old_node_is_cancelling(
    make_node: NodeFactory, tmp_path: Path
) -> None:
    old, new = await make_node(), await make_node()
    release = asyncio.Event()
    runs: list[int] = []

    async def work(ctx: Context, payload: Any) -> str:
        runs.append(ctx.fencing_token)
        try:
            await release.wait()
        except asyncio.CancelledError:
            # Work that cannot stop halfway (a sync handler in its thread is the same).
            await release.wait()
        return "done"

    def setup(w: Worker) -> None:
        w.add_handler("work", work)

    worker = Worker(
        [old.address, new.address],  # a worker connects to every node
        data_dir=tmp_path / "w",
        worker_id="w",
        heartbeat_interval_s=0.05,
        discover=False,
    )
    setup(worker)
    task = asyncio.create_task(worker.run())
    try:
        await _scenario(old, new, worker, runs, release)
    finally:
        await worker.stop(graceful=False)
        await asyncio.wait({task}, timeout=10)


async def _scenario(
    old: Node, new: Node, worker: Worker, runs: list[int], release: asyncio.Event
) -> None:
    await wait_for(lambda: bool(old.dispatcher.workers()), "worker on the old node")
    old.submit("e1", handler="work", fencing_token=3)
    await wait_for(lambda: runs == [3], "started under token 3")
    old.authority.tokens["e1"] = 0  # the partition moved away: the old node calls it stale
    await wait_for(lambda: worker._attempts.running["e1"].ctx.cancelled, "cancelled")

    await wait_for(lambda: bool(new.dispatcher.workers()), "worker on the new node")
    answers: list[tuple[str, bool]] = []
    probe = worker_pb2.Dispatch(
        execution_id="e1",
        job_id="job-e1",
        handler="work",
        queue="default",
        tenant="t",
        attempt=1,
        fencing_token=7,
    )
    new.authority.tokens["e1"] = 7
    new.dispatcher.probe([probe], lambda eid, taken: answers.append((eid, taken)))
    await wait_for(lambda: answers == [("e1", True)], "the probe adopted it")
    release.set()
    await wait_for(lambda: new.authority.results_for("e1"), "result at the new node")
    (res,) = new.authority.results_for("e1")
    # It did its work: the new owner hears so (CANCELLED would have it run again).
    assert (res.fencing_token, res.outcome) == (7, worker_pb2.OUTCOME_SUCCEEDED), res
    assert runs == [3]  # one run, never a second copy


async def test_a_probe_takes_back_what_the_old_owner_had_a_worker_hold(
    make_node: NodeFactory, tmp_path: Path
) -> None:
    """A graceful handover: the old owner is alive and its promise holds, so its held
    execution would start at the instant even though the new owner's probe came first (its
    Cancel may come later). Given back unstarted at the probe, it runs once: the new owner's."""
    old, new = await make_node(), await make_node()
    runs: list[int] = []

    async def work(ctx: Context, payload: Any) -> None:
        runs.append(ctx.fencing_token)

    worker = Worker(
        [old.address, new.address], data_dir=tmp_path / "w", worker_id="w", discover=False
    )
    worker.add_handler("work", work)
    task = asyncio.create_task(worker.run())
    try:
        await wait_for(lambda: len(old.dispatcher.workers()) == 1, "worker on the old node")
        await wait_for(lambda: len(new.dispatcher.workers()) == 1, "worker on the new node")
        sessions = old.dispatcher._sessions.values()
        await wait_for(lambda: all(s.hold_credits > 0 for s in sessions), "hold credits")
        at = int(time.time() * 1000) + 3000  # far enough for a loaded machine to probe first
        held = worker_pb2.Dispatch(
            execution_id="e2", job_id="job-e2", handler="work", queue="default", tenant="t",
            attempt=1, fencing_token=3, start_at_ms=at,
        )  # fmt: skip
        old.authority.tokens["e2"] = 3
        assert old.dispatcher.hold([held]) == []
        await wait_for(lambda: "e2" in worker._attempts.hold.by_id, "held on the worker")
        probe = worker_pb2.Dispatch()
        probe.CopyFrom(held)
        probe.fencing_token, probe.start_at_ms = 7, 0
        answers: list[tuple[str, bool]] = []
        new.dispatcher.probe([probe], lambda eid, taken: answers.append((eid, taken)))
        await wait_for(lambda: answers == [("e2", False)], "not here")
        await wait_for(lambda: old.authority.results_for("e2"), "given back to the old node")
        assert old.authority.results_for("e2")[0].outcome == worker_pb2.OUTCOME_CANCELLED
        await asyncio.sleep(max(0.0, (at - time.time() * 1000) / 1000) + 0.3)
        assert runs == []  # the old owner's hold never started
    finally:
        await worker.stop(graceful=False)
        await asyncio.wait({task}, timeout=10)

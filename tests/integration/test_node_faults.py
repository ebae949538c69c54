"""Downtime, dead workers and zombies against a real node, real etcd and real worker streams."""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import grpc
import pytest

from integration.cluster_harness import SUCCEEDED, Harness, eventually, restart_node
from schedd.store import prefix_end
from schedd.v1 import execution_pb2, worker_pb2, worker_pb2_grpc

pytestmark = pytest.mark.timeout(120)


async def test_restart_applies_each_misfire_policy(h: Harness) -> None:
    await h.start_node()
    await h.wait_all_owned(h.nodes[0])
    await h.start_worker()
    client = await h.connect()
    jobs = {}
    for mode in ("catch_up", "once", "skip"):
        jobs[mode] = (
            await client.create_job(
                mode, schedule="* * * * * *", handler="echo", misfire=mode, catch_up_limit=100
            )
        ).job
    for job in jobs.values():
        await eventually(
            lambda j=job: h.runs(j.id), lambda rs: any(r.state == SUCCEEDED for r in rs)
        )
    await h.workers[0][0].stop(graceful=True)
    h.workers.clear()
    node = await restart_node(h, 0, down_s=5.0)
    await h.wait_all_owned(node)
    await h.start_worker("w2")
    h.client = None
    client = await h.connect()

    def by_state(rs: list[execution_pb2.Execution], state: int) -> list[execution_pb2.Execution]:
        return [r for r in rs if r.state == state]

    catch = await eventually(
        lambda: h.runs(jobs["catch_up"].id),
        lambda rs: any(
            r.trigger == execution_pb2.TRIGGER_CATCH_UP and r.state == SUCCEEDED for r in rs
        ),
        what="catch-up runs",
    )
    await asyncio.sleep(2.0)
    catch = await h.runs(jobs["catch_up"].id)
    times = sorted(r.scheduled_ms for r in by_state(catch, SUCCEEDED))
    assert all(b - a == 1000 for a, b in itertools.pairwise(times)), f"gaps: {times}"
    assert len([r for r in catch if r.trigger == execution_pb2.TRIGGER_CATCH_UP]) >= 3

    once = await h.runs(jobs["once"].id)
    coalesced = [r for r in once if r.trigger == execution_pb2.TRIGGER_CATCH_UP]
    assert len(coalesced) == 1, [(r.scheduled_ms, r.state, r.trigger) for r in once]
    missed = by_state(once, execution_pb2.EXECUTION_MISSED)
    assert len(missed) >= 2 and all("coalesced" in r.reason for r in missed)

    skip = await h.runs(jobs["skip"].id)
    assert not [r for r in skip if r.trigger == execution_pb2.TRIGGER_CATCH_UP]
    assert len(by_state(skip, execution_pb2.EXECUTION_MISSED)) >= 3


async def _zombie_stream(
    address: str,
) -> tuple[grpc.aio.Channel, grpc.aio.StreamStreamCall, asyncio.Queue[worker_pb2.WorkerMessage]]:
    channel = grpc.aio.insecure_channel(address)
    stub = worker_pb2_grpc.WorkerStub(channel)
    outbox: asyncio.Queue[worker_pb2.WorkerMessage] = asyncio.Queue()

    async def requests() -> AsyncIterator[worker_pb2.WorkerMessage]:
        while True:
            yield await outbox.get()

    call = stub.Connect(requests())
    hello = worker_pb2.Hello(worker_id="zombie", queues=["default"], handlers=["echo"], capacity=1)
    await outbox.put(worker_pb2.WorkerMessage(hello=hello))
    await outbox.put(worker_pb2.WorkerMessage(batch=worker_pb2.WorkerBatch(credits=1)))
    return channel, call, outbox


async def _next_dispatch(call: grpc.aio.StreamStreamCall) -> worker_pb2.Dispatch:
    while True:
        msg = await asyncio.wait_for(call.read(), 15)
        if msg.HasField("batch") and msg.batch.dispatches:
            return msg.batch.dispatches[0]


async def test_zombie_worker_result_is_refused_after_redelivery(h: Harness) -> None:
    node = await h.start_node()
    await h.wait_all_owned(node)
    channel, call, outbox = await _zombie_stream(node.address)
    client = await h.connect()
    job = (await client.create_job("z", schedule="@after 1s", handler="echo", payload={"n": 1})).job
    first = await _next_dispatch(call)
    assert first.job_id == job.id
    # The zombie never heartbeats: its lease runs out and a real worker gets the execution.
    await h.start_worker("w-real")
    done = await eventually(
        lambda: client.get_execution(first.execution_id),
        lambda e: e.state == SUCCEEDED,
        what="redelivery",
    )
    assert done.fencing_token > first.fencing_token
    late = worker_pb2.Result(
        execution_id=first.execution_id,
        fencing_token=first.fencing_token,
        attempt=first.attempt,
        outcome=worker_pb2.OUTCOME_SUCCEEDED,
        output=b'"zombie"',
    )
    await outbox.put(worker_pb2.WorkerMessage(batch=worker_pb2.WorkerBatch(results=[late])))
    while True:
        msg = await asyncio.wait_for(call.read(), 10)
        if msg.HasField("batch") and msg.batch.acks:
            ack = msg.batch.acks[0]
            break
    assert not ack.accepted
    assert ack.code == grpc.StatusCode.FAILED_PRECONDITION.value[0]
    after = await client.get_execution(first.execution_id)
    assert after.result != b'"zombie"' and after.fencing_token == done.fencing_token
    call.cancel()
    await channel.close()


async def test_an_adopted_execution_keeps_its_jobs_payload(h: Harness) -> None:
    """A node that takes a partition over has no job cached yet: the dispatch of an execution
    it adopts must still carry the job's payload (it went out empty, so the handler ran
    without its input)."""
    node = await h.start_node()
    await h.wait_all_owned(node)
    channel, call, _ = await _zombie_stream(node.address)
    client = await h.connect()
    payload = {"n": 7, "text": "kept"}
    await client.create_job("adopted", schedule="@after 1s", handler="echo", payload=payload)
    first = await _next_dispatch(call)
    assert json.loads(first.payload) == payload
    call.cancel()
    await channel.close()
    node = await restart_node(h, 0)  # the new instance adopts what etcd holds
    await h.wait_all_owned(node)
    await h.start_worker("w-after")
    h.client = None
    client = await h.connect()
    done = await eventually(
        lambda: client.get_execution(first.execution_id),
        lambda e: e.state == SUCCEEDED,
        what="the adopted execution to run",
    )
    assert done.fencing_token > first.fencing_token
    assert json.loads(done.result) == payload


WORKER_SCRIPT = textwrap.dedent(
    """
    import asyncio, sys
    from schedd.worker import Worker
    w = Worker([sys.argv[1]], worker_id="victim", data_dir=sys.argv[2])

    @w.handler("slow")
    async def slow(ctx, payload):
        print("started", ctx.execution_id, ctx.fencing_token, flush=True)
        await asyncio.sleep(60)

    asyncio.run(w.run())
    """
)


async def test_sigkill_worker_mid_job_redelivers_with_larger_token(
    h: Harness, tmp_path: Path
) -> None:
    node = await h.start_node()
    await h.wait_all_owned(node)
    proc = subprocess.Popen(
        [sys.executable, "-c", WORKER_SCRIPT, node.address, str(tmp_path / "victim")],
        stdout=subprocess.PIPE,
        text=True,
        env=dict(os.environ),
    )
    try:
        client = await h.connect()
        job = (
            await client.create_job(
                "k", schedule="@after 1s", handler="slow", payload={"seconds": 0.2}
            )
        ).job
        line = await asyncio.wait_for(asyncio.to_thread(proc.stdout.readline), 30)  # type: ignore[union-attr]
        _, eid, token = line.split()
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        await h.start_worker("w-after")
        done = await eventually(
            lambda: client.get_execution(eid),
            lambda e: e.state == SUCCEEDED,
            what="redelivered run",
        )
        assert done.fencing_token > int(token)
        assert done.attempt == 1
        assert done.job_id == job.id
    finally:
        if proc.poll() is None:
            proc.kill()


async def test_graceful_stop_gives_claimed_fires_back_before_its_partitions_go(
    h: Harness, etcd: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """A node stopping on purpose un-claims the fires it claimed ahead, under its own fences.

    Its session (and with it every owner key) must outlive that work: were the keys gone first,
    each give-back would be fenced out, and the next owner would inherit claims instead of due
    entries.
    """
    node = await h.start_node(lead_ms=8_000)
    await h.wait_all_owned(node)
    client = await h.connect()
    at = datetime.fromtimestamp(time.time() + 6, UTC).isoformat(timespec="seconds")
    jobs = [
        (await client.create_job(f"j{i}", schedule=f"@at {at}", handler="echo")).job
        for i in range(8)
    ]
    runs_prefix = h.prefix + b"runs/"
    await eventually(
        lambda: etcd.count(runs_prefix, prefix_end(runs_prefix)),
        lambda n: n == len(jobs),
        what="every fire to be claimed ahead",
    )
    caplog.set_level(logging.INFO, logger="schedd")
    await node.stop(timeout=2.0)
    h.nodes.clear()
    h.client = None
    assert await etcd.count(runs_prefix, prefix_end(runs_prefix)) == 0
    assert "no longer current" not in caplog.text
    assert "gave back" in caplog.text
    # The next owner fires each of them once, from the due index.
    node = await h.start_node(lead_ms=1_000)
    await h.start_worker()
    for job in jobs:
        await eventually(
            lambda j=job: h.runs(j.id),
            lambda rs: len(rs) == 1 and rs[0].state == SUCCEEDED,
            timeout=20,
        )

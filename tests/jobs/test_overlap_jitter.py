"""Overlap policies and jitter end to end (real etcd, node and worker processes, a loopback
HTTP target that counts what is in flight): buffer_one runs one at a time with one waiting;
forbid stays one at a time across a partition move; a jittered job fires at its own
deterministic offset."""

from __future__ import annotations

import asyncio
import itertools
from datetime import datetime

import pytest
from aiohttp import web
from jobs.conftest import KindsCluster, Seen

from integration.cluster_harness import eventually
from schedd._errors import Unavailable
from schedd.client import AsyncClient
from schedd.schedule import jitter_offset_ms
from schedd.v1 import execution_pb2, scheduler_pb2

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]


def _scheduled_ms(s: Seen) -> int:
    return round(datetime.fromisoformat(s.headers["X-Schedd-Scheduled-At"]).timestamp() * 1000)


async def _status(client: AsyncClient) -> scheduler_pb2.ClusterStatus | None:
    try:
        return await client.cluster_status()
    except Unavailable:  # a node still starting, or just stopped
        return None


def slow_target(seconds: float) -> object:
    async def respond(request: web.Request, seen: Seen) -> web.StreamResponse:
        await asyncio.sleep(seconds)
        return web.Response(text="done")

    return respond


async def test_buffer_one_runs_one_at_a_time_with_one_waiting(kinds: KindsCluster) -> None:
    target = await kinds.target(slow_target(2.5))  # type: ignore[arg-type]
    await kinds.start()
    job_id = (
        await kinds.client.create_job(
            "buffered", schedule="* * * * * *", http=target.url("/b"), overlap="buffer_one"
        )
    ).job.id
    await asyncio.sleep(9)
    assert target.max_in_flight == 1, target.max_in_flight
    starts = [s.at for s in target.seen]
    assert 3 <= len(starts) <= 5, starts  # ~9 s / 2.5 s, back to back
    gaps = [b - a for a, b in itertools.pairwise(starts)]
    # The buffered fire starts as soon as the one before ends: 2.5 s apart, not 3 (the next
    # whole second) and never sooner.
    assert all(2.4 <= g <= 2.9 for g in gaps), gaps
    runs = list(await kinds.client.list_executions(job_id=job_id, limit=100))
    skipped = [r for r in runs if r.state == execution_pb2.EXECUTION_SKIPPED]
    assert len(skipped) >= 3, [execution_pb2.ExecutionState.Name(r.state) for r in runs]


async def test_forbid_holds_across_a_partition_move(kinds_etcd: KindsCluster) -> None:
    target = await kinds_etcd.target(slow_target(6))  # type: ignore[arg-type]
    await kinds_etcd.start()
    _, other = kinds_etcd.add_node("n1")
    client = AsyncClient(other, timeout_s=15)
    try:
        await eventually(
            lambda: _status(client),
            lambda st: (
                st is not None
                and {p.owner for p in st.partitions} == {"n0", "n1"}
                and len(st.workers) == 1
            ),
            timeout=30,
            what="both nodes owning partitions, the worker on both",
        )
        job = (
            await kinds_etcd.client.create_job(
                "lonely", schedule="* * * * * *", http=target.url("/f"), overlap="forbid"
            )
        ).job
        st = await client.cluster_status()
        owner = next(p.owner for p in st.partitions if p.partition == job.partition)
        await eventually(
            lambda: asyncio.sleep(0, target.in_flight), lambda n: n == 1, what="a request"
        )
        await asyncio.sleep(1)
        proc = kinds_etcd.procs[0] if owner == "n0" else kinds_etcd.procs[-1]
        proc.signal(15)  # a graceful stop: the partition moves while the request is out
        proc.wait(20)
        survivor = client if owner == "n0" else kinds_etcd.client
        await eventually(
            lambda: _status(survivor),
            lambda st: st is not None and all(p.owner and p.owner != owner for p in st.partitions),
            timeout=30,
            what="the partition to move",
        )
        await asyncio.sleep(8)
        assert target.max_in_flight == 1, target.max_in_flight
        assert len(target.seen) >= 2, "nothing ran after the move"
    finally:
        await client.close()


async def test_a_jittered_job_fires_at_its_own_offsets(kinds: KindsCluster) -> None:
    target = await kinds.target()
    await kinds.start()
    jitter = 800
    job_id = (
        await kinds.client.create_job(
            "jittered", schedule="* * * * * *", http=target.url("/j"), jitter="800ms"
        )
    ).job.id
    await asyncio.sleep(7)
    assert len(target.seen) >= 5
    offsets = []
    for s in target.seen:
        fire = _scheduled_ms(s)
        expected = jitter_offset_ms(job_id, fire, jitter)
        arrived = s.at * 1000 - fire
        assert expected <= arrived <= expected + 150, (fire, expected, arrived)
        offsets.append(expected)
    assert len(set(offsets)) > 1 and max(offsets) > 100, offsets  # spread, not all at :00

"""The cluster from the outside, with real etcd, real nodes and a real worker: a worker given
one node finds the others (and a node that joins later, and forgets one that left); a client
given a dead endpoint first still works; schedctl with every endpoint dead exits 5."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

import pytest

from integration.cluster_harness import Harness, eventually
from schedd.client import AsyncClient
from schedd.dev import free_port
from schedd.node import Node
from schedd.store import partition_of
from schedd.worker import Worker

pytestmark = [pytest.mark.timeout(90), pytest.mark.slow]


async def _node(h: Harness, node_id: str) -> Node:
    # 6 partitions: a third node gets a share (2 nodes own 3 each, 3 nodes at most 2).
    return await h.start_node(node_id=node_id, listen=f"127.0.0.1:{free_port()}", partitions=6)


def _worker_given(h: Harness, address: str) -> tuple[Worker, list[str]]:
    ran: list[str] = []
    w = Worker(
        [address],
        worker_id="w-outside",
        data_dir=h.root / "w-outside",
        discovery_interval_s=0.2,
        forget_node_after_s=1.0,
    )

    @w.handler("echo")
    async def echo(ctx: Any, payload: Any) -> Any:
        ran.append(ctx.job_id)
        return payload

    h.workers.append((w, asyncio.create_task(w.run())))
    return w, ran


async def _live(w: Worker, want: set[str], what: str) -> None:
    await eventually(
        lambda: asyncio.sleep(0, result=set(w.live_endpoints)),
        lambda s: s == want,
        timeout=20,
        what=what,
    )


async def test_a_worker_given_one_node_connects_to_all_and_to_a_joiner(h: Harness) -> None:
    a = await _node(h, "a")
    b = await _node(h, "b")
    w, ran = _worker_given(h, a.address)
    await _live(w, {a.address, b.address}, "streams to a and b")

    c = await _node(h, "c")
    await _live(w, {a.address, b.address, c.address}, "a stream to c, which joined later")
    await eventually(
        lambda: asyncio.sleep(0, result=len(c.partitions)),
        lambda k: k >= 1,
        what="c to own partitions",
    )  # fmt: skip

    # Jobs on c's partitions run on this worker: only its discovered stream can carry them.
    client = await h.connect()
    owned_by_c = set(c.partitions)
    jobs: list[str] = []
    for i in range(40):
        job = (await client.create_job(f"j{i}", schedule="@every 1h", handler="echo")).job
        if partition_of(job.id, c.config.partitions) in owned_by_c:
            jobs.append(job.id)
        if len(jobs) == 3:
            break
    assert jobs, "no job landed on c's partitions"
    for job_id in jobs:
        await client.trigger_job(job_id)
    await eventually(
        lambda: asyncio.sleep(0, result=set(ran)),
        lambda s: set(jobs) <= s,
        what="the jobs on c's partitions to run",
    )  # fmt: skip

    # c leaves: its stream is forgotten after forget_node_after_s, the others stay.
    await c.stop(timeout=2.0)
    h.nodes.remove(c)
    await eventually(
        lambda: asyncio.sleep(0, result=set(w.endpoints)),
        lambda s: s == {a.address, b.address},
        timeout=20,
        what="the stream to c to be forgotten",
    )  # fmt: skip


async def test_a_client_given_a_dead_endpoint_first_works(h: Harness) -> None:
    a = await _node(h, "a")
    dead = f"127.0.0.1:{free_port()}"
    async with AsyncClient([dead, a.address], timeout_s=5) as client:
        created = await client.create_job("x", schedule="@every 1h", handler="echo")
        assert (await client.get_job(created.job.id)).id == created.job.id
        status = await client.cluster_status()
        assert [n.address for n in status.nodes] == [a.address]


async def test_schedctl_with_every_endpoint_dead_exits_5_with_one_line(tmp_path: Path) -> None:
    dead = [f"127.0.0.1:{free_port()}" for _ in range(3)]
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        "from schedd.cli.schedctl import main; main()",
        "--endpoints",
        ",".join(dead[:2]),
        "--endpoint",
        dead[2],
        "cluster",
        "status",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        cwd=tmp_path,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 30)
    lines = err.decode().strip().splitlines()
    assert proc.returncode == 5, (out, err)
    assert len(lines) == 1 and lines[0].startswith("schedctl: error: unavailable:"), lines
    assert all(d in lines[0] for d in dead)
    assert not out

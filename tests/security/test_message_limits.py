"""Size limits on the wire: a node refuses a gRPC message over its ``--max-message-bytes``
with RESOURCE_EXHAUSTED (and goes on serving), the SDK splits a batch create under it and
refuses to send over its own limit, a worker drops a handler's output too large for a result
(the stream stays up), and the dashboard reads no form over 64 KiB."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import grpc
import pytest

from integration.cluster_harness import SUCCEEDED, Harness, eventually, node_config
from schedd import ResourceExhausted
from schedd._limits import GRPC_MAX_MESSAGE_BYTES, HTTP_MAX_REQUEST_BYTES
from schedd.client import AsyncClient, build_job
from schedd.dashboard import Surfaces
from schedd.dev import EtcdProcess
from schedd.node import Node
from schedd.v1 import job_pb2, scheduler_pb2, scheduler_pb2_grpc
from schedd.worker._executor import MAX_RESULT_OUTPUT_BYTES

LIMIT = 4 << 20

#: The dashboard (and metrics endpoint) served around each node of the fixture below.
_SURFACES: dict[int, Surfaces] = {}


@pytest.fixture
async def node(etcd_server: EtcdProcess, etcd_prefix: bytes, tmp_path: Path) -> AsyncIterator[Node]:
    cfg = node_config(
        etcd_server.endpoint,
        etcd_prefix,
        tmp_path / "node",
        max_message_bytes=LIMIT,
        http_listen="127.0.0.1:0",
        http_actions=True,
    )
    n = Node(cfg)
    await n.start()
    surfaces = _SURFACES[id(n)] = await Surfaces.start(n.surface(), cfg)
    try:
        yield n
    finally:
        del _SURFACES[id(n)]
        await surfaces.stop()
        await n.stop(graceful=False)


def _jobs(count: int, payload_bytes: int) -> list[job_pb2.Job]:
    payload = b"x" * payload_bytes
    return [
        build_job(f"big-{i}", schedule="@daily", handler="h", payload=payload) for i in range(count)
    ]


async def test_a_message_over_the_limit_is_resource_exhausted(node: Node) -> None:
    jobs = _jobs(25, 200_000)  # 5 MB in one BatchCreateJobs
    request = scheduler_pb2.BatchCreateJobsRequest(jobs=jobs)
    assert request.ByteSize() > LIMIT
    options = [("grpc.max_send_message_length", 64 << 20)]  # a client that sends anything
    async with grpc.aio.insecure_channel(node.address, options=options) as channel:
        stub = scheduler_pb2_grpc.SchedulerStub(channel)
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await stub.BatchCreateJobs(request, timeout=10)
        assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "larger than max" in (refused.value.details() or "")
        # Refused that call only: the node still serves the channel.
        await stub.GetClusterStatus(scheduler_pb2.GetClusterStatusRequest(), timeout=10)
    async with AsyncClient(node.address) as client:
        # The SDK sends the same jobs as calls under the smallest limit a node may have.
        created = await client.create_jobs(jobs)
        assert [j.name for j in created if isinstance(j, job_pb2.Job)] == [j.name for j in jobs]
        # Its own limit refuses a message before it leaves: not worth a retry.
        huge = job_pb2.Job()
        huge.CopyFrom(jobs[0])
        huge.payload = b"x" * (GRPC_MAX_MESSAGE_BYTES + 1)
        with pytest.raises(ResourceExhausted, match="larger than max") as exhausted:
            await client.create(huge)
        assert not exhausted.value.transient


async def test_an_output_too_large_for_a_result_is_dropped(
    etcd_server: EtcdProcess, etcd_prefix: bytes, tmp_path: Path
) -> None:
    h = Harness(etcd_server.endpoint, etcd_prefix, tmp_path)
    await h.start_node()
    worker = h.new_worker()

    @worker.handler("big")
    async def big(ctx: Any, payload: Any) -> bytes:
        return b"x" * (MAX_RESULT_OUTPUT_BYTES + 1)

    h.workers.append((worker, asyncio.create_task(worker.run())))
    try:
        client = await h.connect()
        big_job = (await client.create_job("big", schedule="@after 1s", handler="big")).job
        echo_job = (await client.create_job("after", schedule="@after 1s", handler="echo")).job
        for job_id in (big_job.id, echo_job.id):  # the stream carried both: it stayed up
            await eventually(lambda j=job_id: h.runs(j), lambda rs: any(r.state == SUCCEEDED
                             for r in rs), what=f"{job_id} to succeed")  # fmt: skip
        (run,) = await h.runs(big_job.id)
        assert run.result == b""
        assert run.error == (
            f"output of {MAX_RESULT_OUTPUT_BYTES + 1} bytes dropped: a result carries at most"
            f" {MAX_RESULT_OUTPUT_BYTES}"
        )
    finally:
        await h.close()


async def test_the_dashboard_reads_no_large_form(node: Node) -> None:
    dashboard = _SURFACES[id(node)].dashboard
    assert dashboard is not None
    url = f"{dashboard.url}actions/pause/j-1"
    async with aiohttp.ClientSession() as session:
        form = {"csrf": "x" * (HTTP_MAX_REQUEST_BYTES + 1)}
        async with session.post(url, data=form) as response:
            assert response.status == 413
        async with session.post(url, data={"csrf": "x"}) as response:
            assert response.status == 403  # small: read, and refused for its token

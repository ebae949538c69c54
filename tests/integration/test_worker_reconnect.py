"""A worker comes back to a node restarted on the same address at once, not after its backoff.

Found in the cluster benchmark: a node killed and restarted on its port was unreached by both
workers for 5 to 7 s after it listened (the workers' own backoff had grown to its 5 s cap, and
gRPC's process-wide subchannel pool handed every new channel the failure backoff that the
membership query's channel had built up). The joining node's wait for the workers ran out,
it took its share with no worker connected, its probes found no one to ask, and executions
the old owner's workers had already run were handed out again: doubled starts.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import grpc
import grpc.aio

from integration.test_worker_stream import MemoryAuthority, wait_for
from schedd.dev import free_port
from schedd.dispatch import KEEPALIVE_SERVER_OPTIONS, DispatchConfig, Dispatcher
from schedd.v1 import scheduler_pb2, scheduler_pb2_grpc
from schedd.worker import Worker


class _Members(scheduler_pb2_grpc.SchedulerServicer):
    """What discovery asks: the live members (this node only)."""

    def __init__(self, node_id: str, address: str) -> None:
        self.node_id, self.address = node_id, address

    async def GetClusterStatus(
        self, request: scheduler_pb2.GetClusterStatusRequest, context: Any
    ) -> scheduler_pb2.ClusterStatus:
        return scheduler_pb2.ClusterStatus(
            nodes=[scheduler_pb2.NodeStatus(node_id=self.node_id, address=self.address)]
        )


async def _serve(address: str) -> tuple[grpc.aio.Server, Dispatcher]:
    server = grpc.aio.server(options=KEEPALIVE_SERVER_OPTIONS)
    dispatcher = Dispatcher("n0", MemoryAuthority(), config=DispatchConfig())
    dispatcher.add_to_server(server)
    scheduler_pb2_grpc.add_SchedulerServicer_to_server(_Members("n0", address), server)
    assert server.add_insecure_port(address) != 0
    await server.start()
    await dispatcher.start()
    return server, dispatcher


async def _stop(server: grpc.aio.Server, dispatcher: Dispatcher) -> None:
    await dispatcher.stop()
    await server.stop(grace=0)


async def test_a_worker_reaches_a_node_restarted_on_its_address_within_a_discovery_round(
    tmp_path: Path,
) -> None:
    address = f"127.0.0.1:{free_port()}"
    server, dispatcher = await _serve(address)
    worker = Worker(
        address,
        worker_id="w0",
        data_dir=tmp_path / "w0",
        discovery_interval_s=0.5,
        reconnect_min_s=0.2,
        reconnect_max_s=30.0,  # so only a revival can bring it back quickly
    )
    task = asyncio.create_task(worker.run())
    try:
        await wait_for(lambda: len(dispatcher.workers()) == 1, "the worker connected")
        await _stop(server, dispatcher)
        # Down long enough for the worker's backoff and gRPC's own to grow well past a second.
        await asyncio.sleep(5)
        server, dispatcher = await _serve(address)
        up = time.monotonic()
        await wait_for(lambda: len(dispatcher.workers()) == 1, "the worker came back", 15)
        back_s = time.monotonic() - up
        # One discovery round (0.5 s) to see the node live, then one connection attempt.
        assert back_s < 2.0, f"the worker came back {back_s:.2f} s after the node listened"
    finally:
        await worker.stop(graceful=False)
        await asyncio.wait({task}, timeout=10)
        await _stop(server, dispatcher)

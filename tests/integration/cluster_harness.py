"""A real node (etcd from the session fixture, gRPC on a free loopback port) and workers."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypeVar

import pytest

from schedd.client import AsyncClient
from schedd.dashboard import DashboardServer, Surfaces
from schedd.dev import EtcdProcess
from schedd.node import Node, NodeConfig
from schedd.obs import PrometheusRecorder
from schedd.store import parse_store
from schedd.v1 import execution_pb2
from schedd.worker import Worker

T = TypeVar("T")

SUCCEEDED = execution_pb2.EXECUTION_SUCCEEDED


async def eventually(
    probe: Callable[[], Awaitable[T]],
    ok: Callable[[T], bool],
    *,
    timeout: float = 15.0,
    interval: float = 0.1,
    what: str = "condition",
) -> T:
    """Polls ``probe`` until ``ok(value)``; fails with the last value after ``timeout``."""
    deadline = time.monotonic() + timeout
    value = await probe()
    while not ok(value):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}; last value: {value!r}")
        await asyncio.sleep(interval)
        value = await probe()
    return value


def node_config(endpoint: str, prefix: bytes, data_dir: Path, **overrides: Any) -> NodeConfig:
    """A test node's config; ``endpoint`` is an etcd endpoint or a store address
    (``rocksdb:PATH``: an embedded store, for one node of this process)."""
    cfg = NodeConfig(
        node_id="n1",
        listen="127.0.0.1:0",
        store=parse_store(endpoint),
        prefix=prefix,
        partitions=4,
        data_dir=data_dir,
        window_ms=10_000,
        lead_ms=1_000,
        session_ttl_s=2,
        lease_timeout_ms=2_000,
        heartbeat_interval_ms=500,
        compaction_interval_s=0,
    )
    return replace(cfg, **overrides)


@dataclass
class Harness:
    endpoint: str
    prefix: bytes
    root: Path
    nodes: list[Node] = field(default_factory=list)
    workers: list[tuple[Worker, asyncio.Task[None]]] = field(default_factory=list)
    calls: dict[str, list[Any]] = field(default_factory=dict)
    client: AsyncClient | None = None
    #: The metrics endpoint and dashboard of each node started with them (by node id).
    surfaces: dict[int, Surfaces] = field(default_factory=dict)

    async def start_node(self, **overrides: Any) -> Node:
        n = len(self.nodes)
        cfg = node_config(self.endpoint, self.prefix, self.root / f"node{n}", **overrides)
        recorder = PrometheusRecorder(("node",)) if cfg.metrics_listen else None
        node = Node(cfg, recorder=recorder)
        await node.start()
        if cfg.metrics_listen or cfg.http_listen:
            # As ``schedd node`` does: served around the node, not by it.
            self.surfaces[id(node)] = await Surfaces.start(node.surface(), cfg)
        self.nodes.append(node)
        await eventually(
            lambda: asyncio.sleep(0, result=len(node.partitions)),
            lambda k: k >= 1,
            what="the node to own partitions",
        )
        return node

    async def wait_all_owned(self, node: Node) -> None:
        await eventually(
            lambda: asyncio.sleep(0, result=len(node.partitions)),
            lambda k: k == node.config.partitions,
            what="the node to own every partition",
        )

    def dashboard(self, node: Node) -> DashboardServer:
        """The dashboard of a node started with ``http_listen``."""
        server = self.surfaces[id(node)].dashboard
        assert server is not None
        return server

    def address(self) -> str:
        return ",".join(n.address for n in self.nodes)

    async def connect(self) -> AsyncClient:
        if self.client is None:
            self.client = AsyncClient(self.address(), timeout_s=10)
        return self.client

    def new_worker(self, worker_id: str = "w1", **kwargs: Any) -> Worker:
        w = Worker(
            [n.address for n in self.nodes],
            worker_id=worker_id,
            data_dir=self.root / worker_id,
            **kwargs,
        )
        calls = self.calls

        @w.handler("echo")
        async def echo(ctx: Any, payload: Any) -> Any:
            calls.setdefault("echo", []).append((ctx.execution_id, ctx.fencing_token, ctx.attempt))
            return payload

        @w.handler("fail")
        def fail(ctx: Any, payload: Any) -> Any:
            calls.setdefault("fail", []).append((ctx.execution_id, ctx.fencing_token, ctx.attempt))
            raise RuntimeError("boom")

        @w.handler("slow")
        async def slow(ctx: Any, payload: Any) -> Any:
            calls.setdefault("slow", []).append((ctx.execution_id, ctx.fencing_token, ctx.attempt))
            await asyncio.sleep(float((payload or {}).get("seconds", 5)))
            return "done"

        return w

    async def start_worker(self, worker_id: str = "w1", **kwargs: Any) -> Worker:
        w = self.new_worker(worker_id, **kwargs)
        self.workers.append((w, asyncio.create_task(w.run())))
        return w

    async def runs(self, job_id: str) -> list[execution_pb2.Execution]:
        client = await self.connect()
        return list(await client.list_executions(job_id=job_id))

    async def close(self) -> None:
        if self.client is not None:
            await self.client.close()
        for w, task in self.workers:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(w.stop(graceful=False), 5)
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        for node in self.nodes:
            surfaces = self.surfaces.pop(id(node), None)
            if surfaces is not None:
                await surfaces.stop()
            with contextlib.suppress(Exception):
                await node.stop(timeout=2.0)


async def restart_node(h: Harness, index: int, *, down_s: float = 0.0, **overrides: Any) -> Node:
    """Stops node ``index`` gracefully, waits ``down_s``, starts a new one on the same data."""
    old = h.nodes[index]
    await old.stop(timeout=2.0)
    if down_s:
        await asyncio.sleep(down_s)
    cfg = replace(old.config, **overrides)
    node = Node(cfg)
    await node.start()
    h.nodes[index] = node
    return node


def harness_on(
    request: pytest.FixtureRequest, store: str, prefix: bytes, tmp_path: Path
) -> Harness:
    """A harness on ``store``: ``etcd`` (the session's etcd) or ``rocksdb`` (an embedded
    store in ``tmp_path``, for one node)."""
    if store == "etcd":
        server: EtcdProcess = request.getfixturevalue("etcd_server")
        return Harness(server.endpoint, prefix, tmp_path)
    return Harness(f"rocksdb:{tmp_path / 'store'}", prefix, tmp_path)

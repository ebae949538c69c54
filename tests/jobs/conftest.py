"""Fixtures of the job-kind tests: a real ``schedd node`` and ``schedd worker`` process per
test (the worker's flags chosen by the test), and loopback HTTP targets served by aiohttp in
the test's own event loop.

The store makes no difference to what these tests check, so ``kinds`` runs the node on the
embedded store (it starts faster, and proves the job kinds, limits, tokens and checkpoints
on it); ``kinds_etcd`` runs it on the session's etcd, for the tests that add a second node
(an embedded store has one).
"""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from aiohttp import web
from cluster.procs import SCHEDD, Proc
from failed_stash import call_failed

from schedd.client import AsyncClient
from schedd.dev import EtcdProcess, free_port
from schedd.v1 import execution_pb2


@dataclass
class Seen:
    """One request a target received."""

    at: float  # time.time() on arrival
    method: str
    path: str
    headers: dict[str, str]
    body: bytes


Responder = Callable[[web.Request, Seen], Awaitable[web.StreamResponse]]


async def _ok(request: web.Request, seen: Seen) -> web.StreamResponse:
    return web.Response(text="fine")


@dataclass
class Target:
    """A loopback HTTP server that records every request and answers through ``respond``."""

    respond: Responder = _ok
    seen: list[Seen] = field(default_factory=list)
    in_flight: int = 0
    max_in_flight: int = 0
    port: int = 0
    _runner: web.AppRunner | None = None

    async def start(self) -> None:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        self.port = free_port()
        await web.TCPSite(self._runner, "127.0.0.1", self.port).start()

    def url(self, path: str = "/", host: str = "127.0.0.1") -> str:
        return f"http://{host}:{self.port}{path}"

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        seen = Seen(time.time(), request.method, request.path, dict(request.headers), b"")
        seen.body = await request.read()
        self.seen.append(seen)
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            return await self.respond(request, seen)
        finally:
            self.in_flight -= 1

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()


class KindsCluster:
    """One node and one worker as real processes; the worker's flags are the test's.

    ``etcd``: the etcd endpoint the nodes use; "" runs the node on an embedded store (in the
    test's directory), where no second node can be added.
    """

    def __init__(self, root: Path, etcd: str = "") -> None:
        self.root = root
        self.etcd = etcd
        self.store = f"etcd://{etcd}" if etcd else f"rocksdb:{root / 'store'}"
        self.prefix = f"/schedd-kinds/{uuid.uuid4().hex[:10]}/"
        self.port = free_port()
        self.procs: list[Proc] = []
        self.targets: list[Target] = []
        self.client = AsyncClient(self.address, timeout_s=15)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    async def target(self, respond: Responder = _ok) -> Target:
        t = Target(respond)
        await t.start()
        self.targets.append(t)
        return t

    async def start(
        self,
        *worker_args: str,
        capacity: int = 32,
        env: dict[str, str] | None = None,
        node_args: tuple[str, ...] = (),
    ) -> None:
        node = [
            *SCHEDD, "node", "--store", self.store, "--listen", self.address,
            "--node-id", "n0", "--data-dir", str(self.root / "n0"), "--partitions", "4",
            "--prefix", self.prefix, *node_args,
        ]  # fmt: skip
        worker = [
            *SCHEDD, "worker", "--connect", self.address, "--worker-id", "w0",
            "--capacity", str(capacity), "--data-dir", str(self.root / "w0"), *worker_args,
        ]  # fmt: skip
        for name, argv, penv in (("n0", node, _env()), ("w0", worker, _worker_env("w0", env))):
            proc = Proc(name, argv, penv, self.root / "logs" / f"{name}.log")
            proc.start()
            self.procs.append(proc)
        deadline = time.monotonic() + 30
        while True:
            for p in self.procs:
                assert p.alive, f"{p.name} exited:\n{p.tail()}"
            try:
                st = await self.client.cluster_status()
                if len(st.workers) == 1 and all(p.owner for p in st.partitions):
                    return
            except Exception:
                pass
            assert time.monotonic() < deadline, "cluster not ready:\n" + self.logs()
            await asyncio.sleep(0.2)

    def add_worker(self, name: str, *args: str, env: dict[str, str] | None = None) -> Proc:
        """Another worker process connected to ``connect`` (default: the first node)."""
        argv = [
            *SCHEDD, "worker", "--worker-id", name, "--data-dir", str(self.root / name), *args,
        ]  # fmt: skip
        if "--connect" not in args:
            argv += ["--connect", self.address]
        proc = Proc(name, argv, _worker_env(name, env), self.root / "logs" / name)
        proc.start()
        self.procs.append(proc)
        return proc

    def add_node(self, name: str) -> tuple[Proc, str]:
        """Another node process on the same etcd prefix; returns it and its address."""
        assert self.etcd, "a second node needs an etcd store: use the kinds_etcd fixture"
        address = f"127.0.0.1:{free_port()}"
        argv = [
            *SCHEDD, "node", "--store", self.store, "--listen", address, "--node-id", name,
            "--data-dir", str(self.root / name), "--partitions", "4", "--prefix", self.prefix,
        ]  # fmt: skip
        proc = Proc(name, argv, _env(), self.root / "logs" / f"{name}.log")
        proc.start()
        self.procs.append(proc)
        return proc, address

    async def runs(self, job_id: str) -> list[execution_pb2.Execution]:
        return list(await self.client.list_executions(job_id=job_id, limit=1000))

    def logs(self) -> str:
        return "\n".join(f"----- {p.name}\n{p.tail(60)}" for p in self.procs)

    async def close(self) -> None:
        await self.client.close()
        for p in self.procs:
            if p.alive:
                p.signal(15)
        for p in self.procs:  # a worker still in a slow request is not waited for long
            try:
                p.wait(4)
            except Exception:
                p.signal(9)
        for t in self.targets:
            await t.close()


def _worker_env(name: str, env: dict[str, str] | None) -> dict[str, str]:
    """A worker's environment: handler modules under tests/ importable (``jobs.…``)."""
    tests = str(Path(__file__).resolve().parents[1])
    return {
        **_env(),
        "PYTHONPATH": os.pathsep.join([tests, os.environ.get("PYTHONPATH", "")]),
        "SCHEDD_WORKER_NAME": name,
        **(env or {}),
    }


def _env() -> dict[str, str]:
    return {**os.environ, "SCHEDD_LOG_LEVEL": os.environ.get("SCHEDD_KINDS_LOG", "info")}


@pytest.fixture
async def kinds(tmp_path: Path, request: pytest.FixtureRequest) -> AsyncIterator[KindsCluster]:
    """One node on the embedded store, one worker."""
    async for c in _running(KindsCluster(tmp_path), request):
        yield c


@pytest.fixture
async def kinds_etcd(
    etcd_server: EtcdProcess, tmp_path: Path, request: pytest.FixtureRequest
) -> AsyncIterator[KindsCluster]:
    """The same on the session's etcd, where a test may add nodes."""
    async for c in _running(KindsCluster(tmp_path, etcd_server.endpoint), request):
        yield c


async def _running(c: KindsCluster, request: pytest.FixtureRequest) -> AsyncIterator[KindsCluster]:
    try:
        yield c
    finally:
        failed = call_failed(request)
        if failed:
            print(f"\n===== process logs =====\n{c.logs()}")
        await c.close()

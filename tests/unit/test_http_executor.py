"""The HTTP executor on its own, against loopback aiohttp servers: TLS verified by default,
headers kept from other hosts on redirects, names that resolve to refused addresses."""

from __future__ import annotations

import asyncio
import json
import shutil
import socket
import ssl
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from schedd.dev import free_port
from schedd.v1 import job_pb2, worker_pb2
from schedd.worker import Context
from schedd.worker._executor import Outcome, Runtime, settle
from schedd.worker._http import HttpConfig, HttpExecutor, RefusedAddress, _GuardedResolver


def _dispatch(target: job_pb2.HttpTarget, payload: bytes = b"") -> worker_pb2.Dispatch:
    return worker_pb2.Dispatch(
        execution_id="job-1@1000",
        job_id="job-1",
        scheduled_ms=1000,
        attempt=1,
        fencing_token=42,
        payload=payload,
        target=job_pb2.Job(http=target).SerializeToString(),
    )


async def run(executor: HttpExecutor, target: job_pb2.HttpTarget) -> Outcome:
    ctx = Context(_dispatch(target), ledger=None)  # type: ignore[arg-type]
    started = executor.begin(ctx, None, Runtime(asyncio.get_running_loop(), None))  # type: ignore[arg-type]
    if isinstance(started, Outcome):
        return started
    await asyncio.wait([started])
    return settle(started)


class Server:
    def __init__(self) -> None:
        self.seen: list[web.Request] = []
        self.headers: list[dict[str, str]] = []
        self.port = free_port()

    async def handle(self, request: web.Request) -> web.StreamResponse:
        self.headers.append(dict(request.headers))
        if request.path.startswith("/to/"):
            raise web.HTTPFound(f"http://{request.path[4:]}/landed")
        if request.path == "/same":
            raise web.HTTPTemporaryRedirect("/landed")
        return web.Response(text="hello")


@pytest.fixture
async def servers() -> AsyncIterator[list[Server]]:
    runners, out = [], []
    for _ in range(2):
        srv = Server()
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", srv.handle)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", srv.port).start()
        runners.append(runner)
        out.append(srv)
    yield out
    for r in runners:
        await r.cleanup()


async def test_authorization_goes_to_the_same_host_only(servers: list[Server]) -> None:
    a, b = servers
    ex = HttpExecutor()
    headers = {"Authorization": "Bearer secret", "X-Keep": "yes"}
    out = await run(ex, job_pb2.HttpTarget(url=f"http://127.0.0.1:{a.port}/same", headers=headers))
    assert out.code == worker_pb2.OUTCOME_SUCCEEDED, out
    assert [h.get("Authorization") for h in a.headers] == ["Bearer secret"] * 2
    url = f"http://127.0.0.1:{a.port}/to/localhost:{b.port}"
    out = await run(ex, job_pb2.HttpTarget(url=url, headers=headers))
    assert out.code == worker_pb2.OUTCOME_SUCCEEDED, out
    assert json.loads(out.output)["url"] == f"http://localhost:{b.port}/landed"
    assert "Authorization" not in b.headers[0] and b.headers[0]["X-Keep"] == "yes"
    await ex.aclose()


async def test_refused_schemes_and_addresses_send_nothing() -> None:
    ex = HttpExecutor(HttpConfig(allow_hosts=("*.example.com",)))
    for url, words in [
        ("ftp://files.example.com/x", "scheme must be http or https"),
        ("http://example.com/", "not in the worker's --http-allow list"),
        ("http://169.254.169.254/", "not in the worker's --http-allow list"),
    ]:
        out = await run(ex, job_pb2.HttpTarget(url=url))
        assert out.code == worker_pb2.OUTCOME_FAILED_PERMANENT and words in out.error, out
    open_ex = HttpExecutor()
    out = await run(open_ex, job_pb2.HttpTarget(url="http://[fe80::1]/"))
    assert out.code == worker_pb2.OUTCOME_FAILED_PERMANENT and "link-local" in out.error
    assert ex.requests_sent == 0 and open_ex.requests_sent == 0


class _FakeInner:
    def __init__(self, hosts: list[str]) -> None:
        self.hosts = hosts

    async def resolve(self, host: str, port: int = 0, family: Any = socket.AF_INET) -> list[Any]:
        return [
            {"hostname": host, "host": h, "port": port, "family": family, "proto": 0, "flags": 0}
            for h in self.hosts
        ]

    async def close(self) -> None: ...


async def test_names_resolving_to_refused_addresses_are_refused() -> None:
    resolver = _GuardedResolver()
    resolver._inner = _FakeInner(["169.254.169.254"])  # type: ignore[assignment]
    with pytest.raises(RefusedAddress, match="metadata"):
        await resolver.resolve("metadata.internal", 80)
    resolver._inner = _FakeInner(["169.254.1.1", "10.0.0.7"])  # type: ignore[assignment]
    kept = await resolver.resolve("mixed.internal", 80)
    assert [r["host"] for r in kept] == ["10.0.0.7"]


@pytest.fixture
def cert(tmp_path: Path) -> tuple[Path, Path]:
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed")
    key, crt = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key),
         "-out", str(crt), "-days", "1", "-subj", "/CN=localhost",
         "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost"],
        check=True, capture_output=True,
    )  # fmt: skip
    return crt, key


async def test_tls_is_verified_by_default(cert: tuple[Path, Path]) -> None:
    crt, key = cert
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(crt, key)
    app = web.Application()

    async def secure(request: web.Request) -> web.Response:
        return web.Response(text="secure")

    app.router.add_get("/", secure)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port, ssl_context=ctx).start()
    try:
        target = job_pb2.HttpTarget(url=f"https://127.0.0.1:{port}/", method="GET")
        strict = HttpExecutor()
        out = await run(strict, target)
        assert out.code == worker_pb2.OUTCOME_FAILED_PERMANENT, out
        assert "TLS certificate" in out.error
        trusting = HttpExecutor(HttpConfig(ca_file=str(crt)))
        out = await run(trusting, target)
        assert out.code == worker_pb2.OUTCOME_SUCCEEDED, out
        assert json.loads(out.output)["body"] == "secure"
        await strict.aclose()
        await trusting.aclose()
    finally:
        await runner.cleanup()

"""The dashboard with the node's auth on: nothing without signing in, a tenant's token sees and
acts on its tenant only, viewers get no actions, and actions are audited like API calls.

A real node (auth on, dashboard with actions) on the session's etcd; the browser is an aiohttp
client session with its own cookie jar (the HTTP a browser would send).
"""

from __future__ import annotations

import re
import time
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from integration.cluster_harness import Harness
from schedd.auth import TokenStore
from schedd.client import AsyncClient
from schedd.dev import EtcdProcess
from schedd.store import Keys, open_store
from schedd.v1 import auth_pb2

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
async def h(etcd_server: EtcdProcess, etcd_prefix: bytes, tmp_path: Path) -> AsyncIterator[Harness]:
    harness = Harness(etcd_server.endpoint, etcd_prefix, tmp_path)
    await harness.start_node(auth=True, http_listen="127.0.0.1:0", http_actions=True)
    try:
        yield harness
    finally:
        await harness.close()


async def _admin_secret(h: Harness) -> str:
    kv = await open_store(h.nodes[0].config.store)
    try:
        _, secret = await TokenStore(kv, Keys(h.prefix)).create(
            auth_pb2.ApiToken(role="admin"), 0, int(time.time() * 1000), "bootstrap"
        )
    finally:
        await kv.close()
    return secret


def _browser() -> aiohttp.ClientSession:
    return aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True))


async def _sign_in(base: str, browser: aiohttp.ClientSession, token: str) -> int:
    async with browser.post(f"{base}login", data={"token": token, "next": "/jobs"}) as resp:
        return resp.status


async def _get(browser: aiohttp.ClientSession, url: str) -> tuple[int, str]:
    async with browser.get(url, allow_redirects=False) as resp:
        return resp.status, await resp.text()


def _csrf(page: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', page)
    assert found, "no action form on the page"
    return found.group(1)


async def test_dashboard_needs_a_token_and_shows_only_its_tenant(h: Harness) -> None:
    node = h.nodes[0]
    base = h.dashboard(node).url
    admin = AsyncClient(h.address(), token=await _admin_secret(h))
    try:
        job_a = (
            await admin.create_job("acme-job", schedule="@every 1h", handler="x", tenant="acme")
        ).job
        job_b = (
            await admin.create_job("bolt-job", schedule="@every 1h", handler="x", tenant="bolt")
        ).job
        await admin.trigger_job(job_a.id)
        editor_b = (await admin.create_token("editor", tenant="bolt")).secret
        viewer_a = (await admin.create_token("viewer", tenant="acme")).secret
        worker = (await admin.create_token("worker")).secret

        async with _browser() as anon:
            status, _ = await _get(anon, f"{base}jobs")
            assert status == 303  # to the sign-in page
            async with anon.get(f"{base}api/runs") as resp:
                assert resp.status == 401
            url = f"{base}actions/pause/{job_a.id}"
            async with anon.post(url, allow_redirects=False) as resp:
                assert resp.status == 303
            assert await _sign_in(base, anon, "sdt_bad_token") == 401
            assert await _sign_in(base, anon, worker) == 401  # worker tokens run workers only
            status, _ = await _get(anon, f"{base}jobs")
            assert status == 303

        async with _browser() as b:
            assert await _sign_in(base, b, editor_b) == 200  # followed to /jobs
            status, page = await _get(b, f"{base}jobs")
            assert status == 200 and "bolt-job" in page and "acme-job" not in page
            status, page = await _get(b, f"{base}jobs/{job_a.id}")
            assert status == 404 and "acme-job" not in page
            async with b.get(f"{base}api/runs") as resp:
                assert resp.status == 200
                assert job_a.id not in await resp.text()
            status, page = await _get(b, f"{base}jobs/{job_b.id}")
            csrf = _csrf(page)
            # B's own form token against A's job: not found, and A's job stays as it was.
            url = f"{base}actions/pause/{job_a.id}"
            async with b.post(url, data={"csrf": csrf}, allow_redirects=False) as resp:
                assert resp.status == 404
            assert not (await admin.get_job(job_a.id)).paused
            # A cross-site form is refused whatever it carries.
            async with b.post(
                f"{base}actions/pause/{job_b.id}", data={"csrf": csrf},
                headers={"Origin": "http://evil.example"}, allow_redirects=False,
            ) as resp:  # fmt: skip
                assert resp.status == 403
            async with b.post(
                f"{base}actions/pause/{job_b.id}", data={"csrf": csrf}, allow_redirects=False
            ) as resp:
                assert resp.status == 303
            assert (await admin.get_job(job_b.id)).paused

        async with _browser() as a:
            assert await _sign_in(base, a, viewer_a) == 200
            status, page = await _get(a, f"{base}jobs/{job_a.id}")
            assert status == 200 and "acme-job" in page and 'name="csrf"' not in page
            async with a.post(f"{base}actions/pause/{job_a.id}", allow_redirects=False) as resp:
                assert resp.status == 403
            status, page = await _get(a, f"{base}dead")
            assert status == 200
            async with a.post(f"{base}logout", allow_redirects=False) as resp:
                assert resp.status == 303
            status, _ = await _get(a, f"{base}jobs")
            assert status == 303

        # The dashboard's pause is in the audit trail, by B's token, from the browser's address.
        entries = await admin.list_audit(tenant="bolt")
        pause = [e for e in entries if e.method == "PauseJob"]
        assert len(pause) == 1 and pause[0].code == "OK" and pause[0].target == job_b.id
        assert pause[0].role == "editor" and pause[0].peer
    finally:
        await admin.close()

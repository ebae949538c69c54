"""The dashboard's HTTP layer against a stub node: headers on every response, read-only 403,
CSRF-checked actions, 404s. (The browser test drives it against a real node.)"""

from __future__ import annotations

import re
from types import SimpleNamespace
from typing import Any

from aiohttp.test_utils import TestClient, TestServer

from schedd._errors import JobNotFound
from schedd.auth import ApiGate
from schedd.dashboard import DashboardServer
from schedd.obs import NoopRecorder
from schedd.v1 import execution_pb2, job_pb2, scheduler_pb2

EVIL = "<script>alert(1)</script>"


class StubApi:
    def __init__(self) -> None:
        self.job = job_pb2.Job(id="j1", name=EVIL, tenant="t")
        self.job.schedule.expr = "@every 1h"
        self.job.schedule.timezone = "Europe/Berlin"
        self.calls: list[tuple[str, str]] = []

    async def list_jobs(self, req: Any) -> scheduler_pb2.ListJobsResponse:
        return scheduler_pb2.ListJobsResponse(jobs=[self.job])

    async def get_job(self, req: Any) -> job_pb2.Job:
        if req.id != self.job.id:
            raise JobNotFound(req.id)
        return self.job

    async def list_executions(self, req: Any) -> scheduler_pb2.ListExecutionsResponse:
        ex = execution_pb2.Execution(id="j1@1", job_id="j1", due_ms=1000, started_ms=1500)
        return scheduler_pb2.ListExecutionsResponse(executions=[ex])

    async def list_dead_letters(self, req: Any) -> scheduler_pb2.ListDeadLettersResponse:
        dead = execution_pb2.Execution(id="j1@2", job_id="j1", error=EVIL)
        return scheduler_pb2.ListDeadLettersResponse(executions=[dead])

    async def cluster_status(self, req: Any) -> scheduler_pb2.ClusterStatus:
        return scheduler_pb2.ClusterStatus(cluster_id="c<1>", partition_count=1)

    async def pause_job(self, req: Any) -> job_pb2.Job:
        self.calls.append(("pause", req.id))
        return self.job

    async def redrive(self, req: Any) -> scheduler_pb2.RedriveDeadLettersResponse:
        self.calls.append(("redrive", req.execution_ids[0]))
        return scheduler_pb2.RedriveDeadLettersResponse()


def stub_node() -> Any:
    return SimpleNamespace(
        api=StubApi(),
        node_id="n<1>",
        auth=False,
        gate=ApiGate(auth=False),
        health=SimpleNamespace(serving=True),
        recorder=NoopRecorder(),
        clock=SimpleNamespace(now_ms=lambda: 1_700_000_000_000),
    )


async def client_for(actions: bool) -> tuple[TestClient[Any, Any], Any]:
    node = stub_node()
    client = TestClient(TestServer(DashboardServer(node, "127.0.0.1:0", actions).app()))
    await client.start_server()
    return client, node


def secure(headers: Any) -> bool:
    return (
        headers["Content-Security-Policy"].startswith("default-src 'self'")
        and headers["X-Content-Type-Options"] == "nosniff"
        and headers["X-Frame-Options"] == "DENY"
    )


async def test_every_response_is_escaped_and_has_the_security_headers() -> None:
    client, _ = await client_for(actions=False)
    try:
        for path in ("/", "/jobs", "/jobs/j1", "/runs", "/dead", "/lateness"):
            resp = await client.get(path)
            text = await resp.text()
            assert resp.status == 200, path
            assert secure(resp.headers), path
            assert "<script>alert" not in text and "<form" not in text.replace(
                '<form method="get"', ""
            ), path
        for path, status in (("/jobs/nope", 404), ("/nowhere", 404), ("/static/dash.js", 200)):
            resp = await client.get(path)
            assert resp.status == status and secure(resp.headers), path
        assert (await client.get("/static/dash.css")).content_type == "text/css"
        data = await (await client.get("/api/runs")).json()
        assert data["rows"][0][0] == "j1@1" and data["rows"][0][6] == "500 ms"
        resp = await client.post("/actions/pause/j1", data={"csrf": "x"})
        assert resp.status == 403 and secure(resp.headers)
    finally:
        await client.close()


async def test_actions_need_the_token_of_the_browsers_cookie() -> None:
    client, node = await client_for(actions=True)
    try:
        page = await client.get("/jobs/j1")
        cookie = page.cookies["schedd_csrf"]
        assert cookie["samesite"] == "Strict" and cookie["httponly"]
        token = re.search(r'name="csrf" value="([0-9a-f]+)"', await page.text())
        assert token is not None
        bad = await client.post("/actions/pause/j1", data={"csrf": "0" * 64})
        assert bad.status == 403 and node.api.calls == []
        ok = await client.post(
            "/actions/pause/j1", data={"csrf": token.group(1)}, allow_redirects=False
        )
        assert ok.status == 303 and ok.headers["Location"] == "/jobs/j1" and secure(ok.headers)
        redrive = await client.post(
            "/actions/redrive/j1%402", data={"csrf": token.group(1)}, allow_redirects=False
        )
        assert redrive.status == 303 and redrive.headers["Location"] == "/dead"
        assert node.api.calls == [("pause", "j1"), ("redrive", "j1@2")]
        client.session.cookie_jar.clear()
        stolen = await client.post("/actions/pause/j1", data={"csrf": token.group(1)})
        assert stolen.status == 403 and len(node.api.calls) == 2
    finally:
        await client.close()

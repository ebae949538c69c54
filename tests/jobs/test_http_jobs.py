"""HTTP jobs end to end: real etcd, a real `schedd node` and `schedd worker` process, real
loopback targets. What the target receives, what the run records, which answers are retried,
the breaker, the bulkhead and the outbound rules."""

from __future__ import annotations

import asyncio
import json
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from jobs.conftest import KindsCluster, Seen

from integration.cluster_harness import eventually
from schedd.client import build_job
from schedd.dev import free_port
from schedd.v1 import execution_pb2, job_pb2

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

SCHEDCTL = str(Path(sys.executable).parent / "schedctl")
DONE = (execution_pb2.EXECUTION_SUCCEEDED, execution_pb2.EXECUTION_DEAD)


async def ctl(c: KindsCluster, *args: str) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        SCHEDCTL, "--endpoints", c.address, *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    return proc.returncode or 0, out.decode(), err.decode()


async def create(c: KindsCluster, name: str, url: str, **kw: Any) -> str:
    kw.setdefault("schedule", "@after 1s")
    res = await c.client.create_job(name, http=url, **kw)
    return res.job.id


async def finished(c: KindsCluster, job_id: str, timeout: float = 30) -> execution_pb2.Execution:
    runs = await eventually(
        lambda: c.runs(job_id),
        lambda rs: any(r.state in DONE for r in rs),
        timeout=timeout,
        what=f"job {job_id} to finish",
    )
    return next(r for r in runs if r.state in DONE)


async def test_http_job_sends_what_it_promises_and_records_the_answer(
    kinds: KindsCluster,
) -> None:
    target = await kinds.target()
    await kinds.start()
    code, out, err = await ctl(
        kinds, "job", "create", "hook", "--schedule", "@after 1s", "--http", target.url("/hook"),
        "--method", "PUT", "--header", "X-Team: blue", "--header", "Idempotency-Key: mine",
        "--payload", '{"a": 1}', "-o", "json",
    )  # fmt: skip
    assert code == 0, err
    job_id = json.loads(out)["id"]
    run = await finished(kinds, job_id)
    assert run.state == execution_pb2.EXECUTION_SUCCEEDED, run
    assert len(target.seen) == 1
    seen = target.seen[0]
    assert (seen.method, seen.path, seen.body) == ("PUT", "/hook", b'{"a":1}')
    h = seen.headers
    assert h["X-Team"] == "blue"
    assert h["Idempotency-Key"] == run.id  # schedd's, not the job's
    assert h["X-Schedd-Execution-Id"] == run.id
    assert int(h["X-Schedd-Fencing-Token"]) == run.fencing_token
    assert h["X-Schedd-Attempt"] == "1"
    assert h["X-Schedd-Job-Id"] == job_id
    assert h["Content-Type"] == "application/json"
    assert h["User-Agent"].startswith("schedd/")
    scheduled = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(run.scheduled_ms / 1000))
    assert h["X-Schedd-Scheduled-At"].startswith(scheduled)
    code, out, err = await ctl(kinds, "run", "get", run.id, "-o", "json")
    assert code == 0, err
    result = json.loads(out)["result"]
    assert result["status"] == 200 and result["body"] == "fine"
    assert result["truncated"] is False and result["duration_ms"] >= 0


async def test_http_answers_retry_or_fail_for_good(kinds: KindsCluster) -> None:
    big = "x" * 10_000

    async def respond(request: web.Request, seen: Seen) -> web.StreamResponse:
        if request.path == "/flaky":  # 503 with Retry-After: 2 s, then fine
            first = sum(1 for s in target.seen if s.path == "/flaky") == 1
            if first:
                return web.Response(status=503, headers={"Retry-After": "2"}, text="busy")
            return web.Response(text="ok now")
        if request.path == "/gone":
            return web.Response(status=404, text="no such hook")
        if request.path == "/teapot":
            return web.Response(status=418, text="short and stout")
        if request.path == "/big":
            return web.Response(status=500, text=big)
        if request.path == "/to-metadata":
            raise web.HTTPFound("http://169.254.169.254/latest/meta-data/")
        if request.path == "/loop":
            raise web.HTTPFound("/loop")
        if request.path == "/hop":
            raise web.HTTPSeeOther("/landed")
        return web.Response(text=f"{request.method} {request.path}")

    target = await kinds.target(respond)
    await kinds.start("--http-max-redirects", "3")
    ids = {}
    for name, path in [
        ("flaky", "/flaky"), ("gone", "/gone"), ("teapot", "/teapot"), ("big", "/big"),
        ("to-metadata", "/to-metadata"), ("loop", "/loop"), ("hop", "/hop"),
    ]:  # fmt: skip
        ids[name] = await create(kinds, name, target.url(path), max_attempts=3)
    ids["teapot-ok"] = (
        await kinds.client.create_job(
            "teapot-ok",
            schedule="@after 1s",
            http=job_pb2.HttpTarget(url=target.url("/teapot"), success_codes=[418]),
        )
    ).job.id
    ids["metadata"] = await create(kinds, "metadata", "http://169.254.169.254/latest/")
    closed = f"http://127.0.0.1:{free_port()}/nobody-listens"
    ids["unreachable"] = await create(kinds, "unreachable", closed, max_attempts=2)
    runs = {name: await finished(kinds, jid, timeout=60) for name, jid in ids.items()}

    flaky = runs["flaky"]
    assert flaky.state == execution_pb2.EXECUTION_SUCCEEDED and flaky.attempt == 2
    tries = [s for s in target.seen if s.path == "/flaky"]
    assert len(tries) == 2
    assert tries[1].at - tries[0].at >= 1.9, "Retry-After: 2 not honoured"
    assert [t.headers["X-Schedd-Attempt"] for t in tries] == ["1", "2"]
    assert tries[0].headers["Idempotency-Key"] == tries[1].headers["Idempotency-Key"]
    assert int(tries[1].headers["X-Schedd-Fencing-Token"]) > int(
        tries[0].headers["X-Schedd-Fencing-Token"]
    )

    for name in ("gone", "teapot"):  # 4xx: no retry
        r = runs[name]
        assert r.state == execution_pb2.EXECUTION_DEAD and r.attempt == 1, r
        assert "HTTP 4" in r.error
    assert json.loads(runs["gone"].result) | {"duration_ms": 0} == {
        "status": 404, "duration_ms": 0, "url": target.url("/gone"), "redirects": 0,
        "body": "no such hook", "truncated": False,
    }  # fmt: skip
    assert runs["teapot-ok"].state == execution_pb2.EXECUTION_SUCCEEDED

    big_run = runs["big"]  # 5xx: retried up to max_attempts, body kept to 4 KiB
    assert big_run.state == execution_pb2.EXECUTION_DEAD and big_run.attempt == 3
    doc = json.loads(big_run.result)
    assert doc["status"] == 500 and doc["truncated"] is True and len(doc["body"]) == 4096
    assert sum(1 for s in target.seen if s.path == "/big") == 3

    hop = runs["hop"]  # 303: followed, as a GET
    assert hop.state == execution_pb2.EXECUTION_SUCCEEDED
    assert json.loads(hop.result)["body"] == "GET /landed"
    assert json.loads(hop.result)["redirects"] == 1

    for name, words in (
        ("metadata", "169.254.169.254 is a cloud metadata address"),
        ("to-metadata", "169.254.169.254 is a cloud metadata address"),
        ("loop", "more than 3 redirects"),
    ):
        r = runs[name]
        assert r.state == execution_pb2.EXECUTION_DEAD and r.attempt == 1, (name, r)
        assert words in r.error, (name, r.error)
    assert sum(1 for s in target.seen if s.path == "/loop") == 4  # the first + 3 redirects

    down = runs["unreachable"]  # connection refused: retryable
    assert down.state == execution_pb2.EXECUTION_DEAD and down.attempt == 2
    assert "failed" in down.error and "Connect" in down.error, down.error


async def test_allow_list_limits_the_hosts_a_worker_calls(kinds: KindsCluster) -> None:
    target = await kinds.target()
    await kinds.start("--http-allow", "localhost")
    ok = await create(kinds, "by-name", target.url("/a", host="localhost"))
    refused = await create(kinds, "by-address", target.url("/b"))
    assert (await finished(kinds, ok)).state == execution_pb2.EXECUTION_SUCCEEDED
    r = await finished(kinds, refused)
    assert r.state == execution_pb2.EXECUTION_DEAD and r.attempt == 1
    assert "host 127.0.0.1 is not in the worker's --http-allow list" in r.error
    assert [s.path for s in target.seen] == ["/a"]


async def test_breaker_stops_calling_a_failing_host_and_recovers(kinds: KindsCluster) -> None:
    """50 jobs fire every second at a target that answers 503 for 20 s. Without a breaker it
    would get ~1000 requests (one per fire); with 3 failures to open and a 4 s cool-down it
    gets at most a burst (what was in flight or queued when it opened, bounded by the per-host
    limit of 8 and as many waiting) plus one trial per cool-down: we allow 60. After the
    target heals, the next trial (within one cool-down) closes the circuit and every job's
    fires reach it again."""
    healed_at = 0.0

    async def respond(request: web.Request, seen: Seen) -> web.StreamResponse:
        if not healed_at or seen.at < healed_at:
            return web.Response(status=503, text="down")
        return web.Response(text="up")

    target = await kinds.target(respond)
    cooldown = 4.0
    await kinds.start(
        "--http-breaker-failures", "3", "--http-breaker-cooldown", str(cooldown),
        "--http-max-per-host", "8", capacity=64,
    )  # fmt: skip
    jobs = [
        build_job(
            f"beat-{i}",
            schedule="* * * * * *",
            http=target.url(f"/j{i}"),
            max_attempts=1,
            jitter="1s",  # spread over the second, as a herd of webhooks should be
        )
        for i in range(50)
    ]
    await kinds.client.create_jobs(jobs)
    await eventually(
        lambda: asyncio.sleep(0, len(target.seen)), lambda n: n > 0, timeout=10, what="a request"
    )
    await asyncio.sleep(20)
    during = len(target.seen)
    healed_at = time.time()
    await asyncio.sleep(cooldown + 4)
    fires = 50 * 20
    print(f"breaker: {during} requests during 20 s of 503s ({fires} fires)")
    assert during <= 60, f"{during} requests reached a failing host in 20 s"
    after = [s for s in target.seen if s.at >= healed_at]
    assert after, "no request after the target healed"
    first_ok = min(s.at for s in after)
    assert first_ok - healed_at <= cooldown + 1.0, first_ok - healed_at
    # From one second after the trial on, every job reaches the target every second again.
    window = [s for s in after if first_ok + 1.0 <= s.at < first_ok + 3.0]
    assert len({s.path for s in window}) == 50, sorted({s.path for s in window})
    assert len(window) >= 90, len(window)


async def test_bulkhead_keeps_a_slow_host_from_taking_the_worker(kinds: KindsCluster) -> None:
    """A slow host (10 s per answer) and a healthy one, jobs at both every second, a worker
    with 16 slots and a per-host limit of 4: the slow host never has more than 4 requests in
    flight, and the healthy host's fires start on time (without the limit the slow host's
    requests would take all 16 slots within 2 s and hold them)."""

    async def sleepy(request: web.Request, seen: Seen) -> web.StreamResponse:
        await asyncio.sleep(10)
        return web.Response(text="late")

    slow = await kinds.target(sleepy)
    healthy = await kinds.target()
    await kinds.start("--http-max-per-host", "4", capacity=16)
    jobs = [
        build_job(f"slow-{i}", schedule="* * * * * *", http=slow.url(f"/s{i}"), timeout="30s")
        for i in range(10)
    ] + [build_job(f"ok-{i}", schedule="* * * * * *", http=healthy.url(f"/h{i}")) for i in range(5)]
    await kinds.client.create_jobs(jobs)
    await asyncio.sleep(14)
    assert slow.max_in_flight <= 4, slow.max_in_flight
    assert slow.max_in_flight >= 1
    late = sorted(_lateness_ms(s) for s in healthy.seen)
    print(f"bulkhead: healthy host got {len(late)} requests, lateness p50 "
          f"{late[len(late) // 2]:.1f} ms, max {late[-1]:.1f} ms; slow host max in flight "
          f"{slow.max_in_flight}")  # fmt: skip
    assert len(late) >= 5 * 10, len(late)
    assert late[int(len(late) * 0.99) - 1] <= 500, late[-10:]


def _lateness_ms(s: Seen) -> float:
    scheduled = datetime.fromisoformat(s.headers["X-Schedd-Scheduled-At"]).timestamp()
    return (s.at - scheduled) * 1000

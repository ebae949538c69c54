"""Cancelling executions end to end (real etcd, `schedd node` and `schedd worker` processes,
`schedctl run cancel`): running shell and HTTP attempts are stopped, pending and held ones never
start, every one ends CANCELLED with its reason; ended and unknown ids are refused."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pytest
from aiohttp import web
from jobs.conftest import KindsCluster, Seen
from jobs.test_http_jobs import ctl
from jobs.test_shell_jobs import _alive, shell_job

from integration.cluster_harness import eventually
from schedd._errors import FailedPrecondition, Unavailable
from schedd.client import AsyncClient
from schedd.v1 import execution_pb2

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]
CANCELLED = execution_pb2.EXECUTION_CANCELLED


async def one_run(c: KindsCluster, job_id: str, ok: object, what: str) -> execution_pb2.Execution:
    runs = await eventually(
        lambda: c.runs(job_id), lambda rs: bool(rs) and ok(rs[0]), timeout=30, what=what
    )  # type: ignore[operator]
    return runs[0]


async def test_cancel_running_pending_and_held(kinds: KindsCluster, tmp_path: Path) -> None:
    aborted: list[str] = []

    async def slow(request: web.Request, seen: Seen) -> web.StreamResponse:
        for _ in range(300):  # 30 s, unless the worker closes the connection (the abort)
            transport = request.transport
            if transport is None or transport.is_closing():
                aborted.append(request.path)
                break
            await asyncio.sleep(0.1)
        return web.Response(text="too late")

    target = await kinds.target(slow)
    await kinds.start("--allow-shell", "--shell-kill-grace", "1")
    pids = tmp_path / "pids"
    sleeper = await shell_job(
        kinds, "sleeper", ["sh", "-c", f"echo $$ > {pids}; exec sleep 60"], timeout="2m"
    )
    http = (
        await kinds.client.create_job(
            "slow-hook", schedule="@after 1s", http=target.url("/slow"), timeout="2m"
        )
    ).job.id
    nobody = (
        await kinds.client.create_job("orphan", schedule="@after 1s", handler="nobody")
    ).job.id
    held = (
        await kinds.client.create_job("later", schedule="@after 4s", http=target.url("/later"))
    ).job.id

    running = execution_pb2.EXECUTION_RUNNING
    shell_run = await one_run(kinds, sleeper, lambda r: r.state == running, "the shell job runs")
    await eventually(lambda: asyncio.sleep(0, pids.exists()), bool, what="the pid file")
    pid = int(pids.read_text())
    http_run = await one_run(kinds, http, lambda r: r.state == running, "the request is out")
    orphan = await one_run(kinds, nobody, lambda r: r.started_ms == 0, "the orphan run")
    later = await one_run(kinds, held, lambda r: r.scheduled_ms > 0, "the held run")
    assert later.scheduled_ms - time.time() * 1000 > 500, "too late to cancel before its start"

    # The held one first: it must be cancelled before its instant, and each schedctl call
    # takes a while on a busy machine.
    for run in (later, shell_run, http_run, orphan):
        code, out, err = await ctl(
            kinds, "run", "cancel", run.id, "--reason", "operator said so", "-o", "json"
        )
        assert code == 0, err
        assert json.loads(out)["state"] == "CANCELLED"

    for job_id in (sleeper, http, nobody, held):
        r = await one_run(kinds, job_id, lambda r: r.state == CANCELLED, f"{job_id} cancelled")
        assert r.reason == "cancelled: operator said so", r
    await eventually(lambda: asyncio.sleep(0, _alive(pid)), lambda a: not a, what="sleep killed")
    await eventually(lambda: asyncio.sleep(0, aborted), lambda a: a == ["/slow"], what="abort")
    await asyncio.sleep(max(0.0, later.scheduled_ms / 1000 - time.time()) + 1.5)
    assert [s.path for s in target.seen] == ["/slow"], "the held execution started"

    code, _, err = await ctl(kinds, "run", "cancel", shell_run.id)  # ended: refused
    assert code == 4 and "has ended already (CANCELLED)" in err, (code, err)
    code, _, err = await ctl(kinds, "run", "cancel", f"{sleeper}@1")
    assert code == 3 and "not found" in err, (code, err)
    code, _, err = await ctl(kinds, "run", "cancel", "no-at-sign")
    assert code != 0 and "id" in err and "Traceback" not in err


async def test_cancel_while_the_owner_is_dead_ends_at_takeover(kinds_etcd: KindsCluster) -> None:
    """The owner is SIGKILLed with a live execution; a cancel through another node is written
    to etcd at once, and the node that takes the partition over ends it CANCELLED."""
    await kinds_etcd.start()
    job_id = (
        await kinds_etcd.client.create_job("orphan", schedule="@after 1s", handler="nobody")
    ).job.id
    run = await one_run(kinds_etcd, job_id, lambda r: r.started_ms == 0, "the orphan run")
    kinds_etcd.procs[0].signal(9)  # n0, the owner
    kinds_etcd.procs[0].wait(10)
    _, other = kinds_etcd.add_node("n1")
    client = AsyncClient(other, timeout_s=15)
    try:

        async def cancel() -> execution_pb2.Execution | None:
            try:
                return await client.cancel_execution(run.id, "owner gone")
            except Unavailable:  # n1 still starting
                return None

        ex = await eventually(cancel, lambda e: e is not None, timeout=30, what="n1's answer")
        assert ex is not None and ex.state == CANCELLED
        assert ex.reason == "cancelled: owner gone"

        # Until the partition is taken over, cancelling again answers the cancelled record;
        # once the new owner has ended it, the run is history and a cancel is refused.
        deadline = time.monotonic() + 30
        while True:
            try:
                again = await client.cancel_execution(run.id)
            except FailedPrecondition as e:
                assert "has ended already (CANCELLED)" in str(e)
                break
            assert again.state == CANCELLED
            assert time.monotonic() < deadline, "the new owner did not end the cancelled run"
            await asyncio.sleep(0.2)
        ended = list(await client.list_executions(job_id=job_id))
        assert [(r.state, r.reason) for r in ended] == [(CANCELLED, "cancelled: owner gone")]
    finally:
        await client.close()


async def test_deleting_a_job_cancels_its_live_executions(kinds: KindsCluster) -> None:
    """A job whose handler no worker serves: its runs wait for a worker. Deleting the job
    cancels them (they used to stay behind, live, with `cancelled_executions 0`); running
    ones are stopped the same way (see the cancel tests above)."""
    await kinds.start()
    job_id = (
        await kinds.client.create_job("orphans", schedule="* * * * * *", handler="nobody")
    ).job.id
    live = (
        execution_pb2.EXECUTION_PENDING,
        execution_pb2.EXECUTION_DISPATCHED,
        execution_pb2.EXECUTION_RUNNING,
    )
    dispatched = execution_pb2.EXECUTION_DISPATCHED
    await eventually(
        lambda: kinds.runs(job_id),
        lambda rs: sum(r.state == dispatched for r in rs) >= 2,
        timeout=30,
        what="two runs handed out, waiting for a worker",
    )
    # Counted: those cancelled, and the pre-claimed ones not yet due (removed outright).
    assert await kinds.client.delete_job(job_id) >= 2
    runs = await eventually(
        lambda: kinds.runs(job_id),
        lambda rs: bool(rs) and not any(r.state in live for r in rs),
        timeout=30,
        what="no run of the deleted job left live",
    )
    ended = [r for r in runs if r.state == CANCELLED]
    assert len(ended) >= 2 and {r.reason for r in ended} == {"job deleted"}

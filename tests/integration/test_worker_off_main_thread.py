"""`Worker.run_sync()` off the main thread (a web app's background thread, say): it runs
jobs, installs no signal handler (signals reach only the main thread), and `stop_soon()`
from another thread stops it gracefully."""

from __future__ import annotations

import asyncio
import threading

import pytest

from integration.cluster_harness import Harness, eventually
from schedd.v1 import execution_pb2

pytestmark = pytest.mark.timeout(60)


async def test_run_sync_in_a_thread_runs_jobs_and_stops_when_asked(h_embedded: Harness) -> None:
    h = h_embedded
    await h.start_node()
    worker = h.new_worker("threaded")
    failures: list[BaseException] = []

    def run() -> None:
        try:
            worker.run_sync()
        except BaseException as exc:
            failures.append(exc)

    thread = threading.Thread(target=run, name="schedd-worker")
    thread.start()
    client = await h.connect()
    job = (await client.create_job("in-a-thread", schedule="@every 1s", handler="echo")).job
    await eventually(
        lambda: h.runs(job.id),
        lambda rs: any(r.state == execution_pb2.EXECUTION_SUCCEEDED for r in rs),
        what="a run done by the threaded worker",
    )
    worker.stop_soon()
    await asyncio.to_thread(thread.join, 20)
    assert not thread.is_alive() and failures == []

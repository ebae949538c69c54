"""A failed attempt's retry hint (``Result.retry_after_ms``: an HTTP target's Retry-After, an
open breaker) over a real node and worker: the node waits at least that long, and never
longer than the job's max backoff. A failed attempt's output is kept with the waiting
execution when it is short."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from integration.cluster_harness import Harness, eventually
from schedd.client import build_job
from schedd.node._settle_policy import FAILED_OUTPUT_KEPT
from schedd.v1 import execution_pb2, worker_pb2
from schedd.worker import Context
from schedd.worker._executor import Outcome, Runtime


class Hinting:
    """An http executor that fails attempt 1 with a 1.5 s hint, attempt 2 with a 1 h hint,
    and succeeds on attempt 3; it notes when each attempt began."""

    def __init__(self) -> None:
        self.began: dict[int, float] = {}

    def begin(self, ctx: Context, payload: Any, runtime: Runtime) -> Outcome | asyncio.Future[Any]:
        self.began[ctx.attempt] = time.monotonic()
        if ctx.attempt == 1:
            return Outcome(
                worker_pb2.OUTCOME_FAILED,
                output=b'{"status":503}',
                error="busy",
                retry_after_ms=1500,
            )
        if ctx.attempt == 2:  # output too long to keep with the execution in etcd
            big = b'"' + b"x" * (FAILED_OUTPUT_KEPT + 1) + b'"'
            return Outcome(
                worker_pb2.OUTCOME_FAILED, output=big, error="busy", retry_after_ms=3_600_000
            )
        return Outcome(worker_pb2.OUTCOME_SUCCEEDED, output=b'"ok"')


@pytest.fixture
def h(h_embedded: Harness) -> Harness:
    """What this file tests does not depend on the store: the embedded one."""
    return h_embedded


async def test_retry_waits_for_the_hint_but_no_longer_than_max_backoff(h: Harness) -> None:
    await h.start_node()
    worker = h.new_worker()
    hinting = Hinting()
    worker.add_executor("http", hinting)
    h.workers.append((worker, asyncio.create_task(worker.run())))
    client = await h.connect()
    job = build_job("hinted", schedule="@after 1s", http="http://example.invalid/", max_attempts=3)
    job.retry.initial_backoff_ms = 10
    job.retry.max_backoff_ms = 2500
    created = await client.create(job)
    waiting = await eventually(
        lambda: h.runs(created.job.id),
        lambda rs: bool(rs) and rs[0].attempt == 2,  # waiting, claimed or held: not yet run
        timeout=30,
        what="the first retry wait",
    )
    assert waiting[0].result == b'{"status":503}' and waiting[0].error == "busy", waiting[0]
    waiting = await eventually(
        lambda: h.runs(created.job.id),
        lambda rs: rs[0].attempt == 3 and rs[0].state != execution_pb2.EXECUTION_SUCCEEDED,
        timeout=30,
        what="the second retry wait",
    )
    assert waiting[0].result == b"" and waiting[0].error == "busy"
    runs = await eventually(
        lambda: h.runs(created.job.id),
        lambda rs: any(r.state == execution_pb2.EXECUTION_SUCCEEDED for r in rs),
        timeout=30,
        what="the third attempt to succeed",
    )
    assert runs[0].attempt == 3
    first_gap = hinting.began[2] - hinting.began[1]
    second_gap = hinting.began[3] - hinting.began[2]
    assert 1.4 <= first_gap <= 2.5, first_gap  # the 1.5 s hint over a 10 ms backoff
    assert 2.4 <= second_gap <= 3.5, second_gap  # a 1 h hint, capped at max backoff 2.5 s

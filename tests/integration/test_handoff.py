"""Partitions handed over on purpose (a node stops, a node joins) while a worker holds
their next fires: every fire still runs exactly once."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import pytest

from integration.cluster_harness import Harness, eventually, restart_node
from schedd.dev import free_port

pytestmark = [pytest.mark.timeout(90), pytest.mark.slow]


async def test_graceful_handoffs_with_held_fires_lose_nothing(h: Harness) -> None:
    a = await h.start_node(node_id="a", listen=f"127.0.0.1:{free_port()}")
    b = await h.start_node(node_id="b", listen=f"127.0.0.1:{free_port()}")
    worker = h.new_worker("w1")
    runs: list[tuple[str, int]] = []

    @worker.handler("record")
    async def record(ctx: Any, payload: Any) -> None:
        runs.append((ctx.job_id, ctx.scheduled_ms))

    h.workers.append((worker, asyncio.create_task(worker.run())))
    client = await h.connect()
    jobs = [
        (
            await client.create_job(
                f"every-second-{i}", schedule="* * * * * *", handler="record",
                misfire="catch_up", catch_up_limit=100,
            )
        ).job.id
        for i in range(8)
    ]  # fmt: skip
    await eventually(
        lambda: asyncio.sleep(0, result={j for j, _ in runs}), lambda s: len(s) == 8, what="fires"
    )
    first = {j: min(t for jj, t in runs if jj == j) for j in jobs}
    for _ in range(2):  # b leaves (its partitions go to a), then comes back (a gives some up)
        await asyncio.sleep(1.5)
        b = await restart_node(h, 1, down_s=1.0)
        await eventually(
            lambda b=b: asyncio.sleep(0, result=len(b.partitions)),
            lambda k: k >= 1,
            what="b owns",
        )
    await asyncio.sleep(2.0)
    end = a.clock.now_ms()
    expected = {(j, t) for j in jobs for t in range(first[j], end, 1000)}

    def missing() -> set[tuple[str, int]]:
        return expected - set(runs)

    await eventually(
        lambda: asyncio.sleep(0, result=missing()), lambda m: not m, timeout=10,
        what="every fire to run",
    )  # fmt: skip
    doubled = [k for k, n in Counter(runs).items() if n > 1 and k in expected]
    assert not doubled

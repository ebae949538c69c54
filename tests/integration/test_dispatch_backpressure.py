"""Backpressure from dispatch to claiming: with no worker to take them, a node claims only up
to its dispatch backlog bound; the fires stay durable in etcd and all run once a worker comes."""

from __future__ import annotations

import asyncio
import time
from collections import Counter

import pytest

from integration.cluster_harness import Harness, eventually

pytestmark = pytest.mark.timeout(90)

JOBS = 20
BOUND = 30


@pytest.fixture
def h(h_embedded: Harness) -> Harness:
    """What this file tests does not depend on the store: the embedded one."""
    return h_embedded


async def test_claims_stop_at_the_dispatch_bound_and_every_fire_runs_later(h: Harness) -> None:
    node = await h.start_node(max_dispatch_backlog=BOUND)
    client = await h.connect()
    created = []
    for i in range(JOBS):
        res = await client.create_job(
            f"every-second-{i}",
            schedule="* * * * * *",
            handler="echo",
            misfire="catch_up",
            catch_up_limit=100,
        )
        created.append(res.job.id)
    t_created = time.time()
    # No worker: every claimed fire waits in the dispatch queue. Unbounded it would hold about
    # JOBS per second by now; bounded, at most the bound plus the claims in flight.
    peak = 0
    for _ in range(40):
        await asyncio.sleep(0.1)
        peak = max(peak, node.dispatcher.pending_count())
    await asyncio.sleep(2.0)
    for _ in range(20):
        await asyncio.sleep(0.1)
        peak = max(peak, node.dispatcher.pending_count())
    waited = time.time() - t_created
    assert JOBS * waited > 2.5 * BOUND  # unbounded, the queue would be far past the bound
    assert BOUND <= peak <= BOUND + 2 * JOBS, peak
    # A worker comes: the queue drains, the held-back fires are claimed late (catch-up), and
    # every fire from each job's first one until now runs exactly once.
    await h.start_worker()
    t_end = time.time()

    first_ms = {}
    for job_id in created:
        job = await client.get_job(job_id)
        first_ms[job_id] = job.created_ms

    async def ran() -> Counter[str]:
        await asyncio.sleep(0)
        return Counter(eid for eid, _token, _attempt in h.calls.get("echo", []))

    def expected() -> set[str]:
        # every second of each job from its first fire (after creation) to t_end - 1 s
        out = set()
        for job_id, created_ms in first_ms.items():
            s = created_ms // 1000 + 1
            while s * 1000 <= t_end * 1000 - 1000:
                out.add(f"{job_id}@{s * 1000}")
                s += 1
        return out

    want = expected()
    counts = await eventually(
        ran, lambda c: want <= set(c), timeout=40, what="every held-back fire run"
    )
    assert max(counts.values()) == 1, [e for e, n in counts.items() if n > 1][:5]
    assert node.dispatcher.pending_count() <= BOUND

"""A test harness for code that uses schedd: the scheduler in one process, on virtual time.

A test creates jobs, registers handlers as on a worker, moves a virtual clock by days or
months in milliseconds of real time, and asserts which runs happened::

    from datetime import datetime
    from zoneinfo import ZoneInfo

    from schedd.testing import SchedulerHarness

    async def test_report_runs_on_weekdays() -> None:
        async with SchedulerHarness(start="2026-03-27T00:00:00+01:00") as h:
            @h.handler("send_report")
            async def send_report(ctx, payload):
                return {"sent_for": ctx.scheduled_ms}

            job = await h.create_job("report", schedule="0 9 * * 1-5", tz="Europe/Berlin",
                                     handler="send_report")
            await h.advance(days=4)
            berlin = ZoneInfo("Europe/Berlin")
            assert [r.scheduled_at for r in h.runs(job)] == [
                datetime(2026, 3, 27, 9, tzinfo=berlin),  # Friday, CET (UTC+1)
                datetime(2026, 3, 30, 9, tzinfo=berlin),  # Monday, CEST after the change
            ]

What runs is schedd's own code, not a model of it: the client API (validation and its
errors, idempotency keys, the store's transactions) on the in-memory store with etcd's
semantics; per partition the node's ``Partition`` (its due window, claims made ahead of the
fire, misfire policies, the timer wheel; results by fencing token, retries with exponential
backoff and full jitter, dead letters) under a real fence; the node's ``FirePolicy`` (overlap
policies); handlers started and judged by the worker SDK's own executor
(``Context``, payload decoding, ``PermanentError``, deadlines). Only the loops that wait in
real time are replaced: the harness visits each instant at which something is due, in order,
and calls the same steps they call. ``down()`` stops the node and starts a new one that takes
the partitions over under a new epoch, as after a real outage.

What it does NOT model:

* the network and processes: no gRPC, one node, one worker pool of unlimited capacity that
  serves every queue; no worker crashes, lost streams, lease expiry or redelivery (and so no
  heartbeats: ``ctx.heartbeat()`` does nothing; checkpoints stay with the one worker);
* holding executions on workers ahead of their instant (everything starts at its instant);
* tenant rate limits and quotas set with ``set_tenant_limits`` (not exposed here);
* HTTP and shell jobs, unless an executor is added (``add_executor``);
* real time inside handlers: a handler takes virtual time only through ``await h.sleep(s)``;
  one that waits on anything else (real I/O, ``asyncio.sleep``) is not waited for.

Determinism: job ids and the backoff's jitter come from ``seed``; the jitter of fire times is
a hash of the job id. The same test with the same seed makes the same runs.
"""

from schedd.testing._harness import SchedulerHarness
from schedd.testing._runs import Attempt, Run

__all__ = ["Attempt", "Run", "SchedulerHarness"]

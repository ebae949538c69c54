"""The example of docs/testing.md: a user's tests of their own jobs with schedd.testing.

The suite runs this file as it is (``make test``); the page shows it.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

from schedd.testing import SchedulerHarness
from schedd.worker import Context, PermanentError

BERLIN = ZoneInfo("Europe/Berlin")


async def test_report_runs_on_weekdays_across_the_dst_change() -> None:
    # Friday 27 March 2026; Berlin moves its clocks forward on Sunday the 29th.
    async with SchedulerHarness(start="2026-03-27T00:00:00+01:00") as h:
        sent: list[datetime] = []

        @h.handler("send_report")
        async def send_report(ctx: Context, payload: Any) -> dict[str, str]:
            sent.append(ctx.scheduled_time)
            return {"to": payload["to"]}

        job = await h.create_job(
            "report",
            schedule="0 9 * * 1-5",
            tz="Europe/Berlin",
            handler="send_report",
            payload={"to": "ops@example.com"},
        )
        await h.advance(days=7)  # a week of virtual time, milliseconds of real time

        at_nine = [datetime(2026, 3, d, 9, tzinfo=BERLIN) for d in (27, 30, 31)] + [
            datetime(2026, 4, d, 9, tzinfo=BERLIN) for d in (1, 2)
        ]
        assert [r.scheduled_at for r in h.runs(job)] == at_nine  # 08:00Z, then 07:00Z
        assert sent == at_nine
        assert {r.state for r in h.runs(job)} == {"SUCCEEDED"}
        assert h.runs(job)[0].result == {"to": "ops@example.com"}


async def test_a_failing_export_retries_then_lands_in_the_dead_letter_queue() -> None:
    async with SchedulerHarness(start="2026-01-05T00:00:00Z", seed=1) as h:
        target_up = False

        @h.handler("export")
        async def export(ctx: Context, payload: Any) -> None:
            if payload is None:
                raise PermanentError("nothing to export")  # no retry
            if not target_up:
                raise ConnectionError("warehouse unreachable")  # retried with backoff

        job = await h.create_job(
            "nightly-export",
            schedule="30 2 * * *",
            handler="export",
            payload={"table": "orders"},
            max_attempts=3,
            retry_initial="1m",
        )
        await h.advance(days=1)
        [run] = h.runs(job)
        assert (run.state, run.attempt) == ("DEAD", 3)
        assert [a.outcome for a in h.attempts(job)] == ["FAILED"] * 3
        assert [r.execution_id for r in await h.dead_letters(job)] == [run.execution_id]

        target_up = True
        await h.redrive(job)
        await h.run_until_idle()
        assert h.runs(job)[0].state == "SUCCEEDED"


async def test_fires_missed_during_an_outage_follow_the_misfire_policy() -> None:
    async with SchedulerHarness(start="2026-01-05T07:30:00Z") as h:

        @h.handler("sync")
        async def sync(ctx: Context, payload: Any) -> None:
            await h.sleep(5)  # handlers take virtual time with h.sleep

        job = await h.create_job("sync", schedule="0 * * * *", handler="sync", misfire="once")
        await h.advance(hours=1)  # 08:00 runs
        await h.down(hours=3)  # the scheduler is down from 08:30 to 11:30
        await h.advance(hours=1)
        assert [(r.scheduled_at.hour, r.state) for r in h.runs(job)] == [
            (8, "SUCCEEDED"),
            (9, "MISSED"),  # coalesced into the 11:00 fire
            (10, "MISSED"),
            (11, "SUCCEEDED"),  # run once, late, when the scheduler came back
            (12, "SUCCEEDED"),
        ]

"""schedd.testing: the scheduler's own code on virtual time, as users' tests drive it.

Each test states what the real scheduler does (docs/schedules.md, docs/architecture.md) and
checks the harness shows exactly that: DST, @every, @at, misfires after downtime, retries,
dead letters and redrive, overlap, pause, the handler's Context.
"""

from __future__ import annotations

import itertools
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest

import schedd.testing
from schedd import InvalidArgument
from schedd.testing import SchedulerHarness
from schedd.worker import Context, PermanentError

NEW_YORK = ZoneInfo("America/New_York")


def _utc(text: str) -> datetime:
    return datetime.fromisoformat(text).astimezone(UTC)


def test_public_api() -> None:
    assert sorted(schedd.testing.__all__) == ["Attempt", "Run", "SchedulerHarness"]


async def _ok(ctx: Context, payload: Any) -> None:
    return None


async def test_cron_spring_forward_runs_a_fixed_time_job_once_after_the_jump() -> None:
    async with SchedulerHarness(start="2025-03-08T00:00:00-05:00") as h:
        h.add_handler("ok", _ok)
        fixed = await h.create_job("fixed", schedule="30 2 * * *", tz="America/New_York",
                                   handler="ok")  # fmt: skip
        every = await h.create_job("every", schedule="*/30 * * * *", tz="America/New_York",
                                   handler="ok")  # fmt: skip
        await h.advance_to("2025-03-10T04:00:00-04:00")
        assert [r.scheduled_at for r in h.runs(fixed)] == [
            _utc("2025-03-08T02:30:00-05:00"),
            _utc("2025-03-09T03:00:00-04:00"),  # 02:30 does not exist: the first instant after
            _utc("2025-03-10T02:30:00-04:00"),
        ]
        around = [
            r.scheduled_at.astimezone(NEW_YORK).strftime("%H:%M")
            for r in h.runs(every)
            if _utc("2025-03-09T01:00:00-05:00") <= r.scheduled_at <= _utc("2025-03-09T03:30-04:00")
        ]
        assert around == ["01:00", "01:30", "03:00", "03:30"]  # nothing at 02:xx
        assert {r.state for r in h.runs()} == {"SUCCEEDED"}


async def test_cron_fall_back_runs_a_fixed_time_job_once_and_others_twice() -> None:
    async with SchedulerHarness(start="2025-11-01T12:00:00-04:00") as h:
        h.add_handler("ok", _ok)
        fixed = await h.create_job("fixed", schedule="30 1 * * *", tz="America/New_York",
                                   handler="ok")  # fmt: skip
        every = await h.create_job("every", schedule="*/30 * * * *", tz="America/New_York",
                                   handler="ok")  # fmt: skip
        await h.advance_to("2025-11-03T12:00:00-05:00")
        assert [r.scheduled_at for r in h.runs(fixed)] == [
            _utc("2025-11-02T01:30:00-04:00"),  # the first occurrence only
            _utc("2025-11-03T01:30:00-05:00"),
        ]
        repeated = [
            r.scheduled_at
            for r in h.runs(every)
            if _utc("2025-11-02T01:00:00-04:00") <= r.scheduled_at <= _utc("2025-11-02T02:00-05:00")
        ]
        assert repeated == [
            _utc("2025-11-02T01:00:00-04:00"), _utc("2025-11-02T01:30:00-04:00"),
            _utc("2025-11-02T01:00:00-05:00"), _utc("2025-11-02T01:30:00-05:00"),
            _utc("2025-11-02T02:00:00-05:00"),
        ]  # fmt: skip


async def test_every_and_at() -> None:
    async with SchedulerHarness(start="2026-05-01T10:00:00Z") as h:
        h.add_handler("ok", _ok)
        every = await h.create_job("poll", schedule="@every 10m", handler="ok")
        once = await h.create_job("once", schedule="@at 2026-05-01T10:25:00Z", handler="ok")
        await h.advance(hours=1)
        assert [r.scheduled_at.strftime("%H:%M") for r in h.runs(every)] == [
            "10:10", "10:20", "10:30", "10:40", "10:50", "11:00",
        ]  # fmt: skip
        assert [r.scheduled_at for r in h.runs(once)] == [_utc("2026-05-01T10:25:00Z")]
        await h.advance(days=30)
        assert len(h.runs(once)) == 1
        assert len(h.runs(every)) == 6 + 30 * 24 * 6


async def _down_three_hours(misfire: str, **kwargs: Any) -> list[tuple[str, str, str]]:
    """An hourly job, the scheduler down 10:30-13:30: what each fire became."""
    async with SchedulerHarness(start="2026-06-01T09:59:00Z") as h:
        h.add_handler("ok", _ok)
        job = await h.create_job("hourly", schedule="0 * * * *", handler="ok", misfire=misfire,
                                 **kwargs)  # fmt: skip
        await h.advance(minutes=31)
        await h.down(hours=3)
        await h.advance(minutes=1)
        return [(r.scheduled_at.strftime("%H:%M"), r.state, r.trigger) for r in h.runs(job)]


async def test_misfire_catch_up_runs_every_missed_fire_late() -> None:
    assert await _down_three_hours("catch_up") == [
        ("10:00", "SUCCEEDED", "SCHEDULE"),
        ("11:00", "SUCCEEDED", "CATCH_UP"),
        ("12:00", "SUCCEEDED", "CATCH_UP"),
        ("13:00", "SUCCEEDED", "CATCH_UP"),
    ]


async def test_misfire_catch_up_limit_records_the_rest_missed() -> None:
    got = await _down_three_hours("catch_up", catch_up_limit=1)
    assert [(t, s) for t, s, _ in got] == [
        ("10:00", "SUCCEEDED"), ("11:00", "MISSED"), ("12:00", "MISSED"), ("13:00", "SUCCEEDED"),
    ]  # fmt: skip


async def test_misfire_once_coalesces_and_skip_drops() -> None:
    once = await _down_three_hours("once")
    assert [(t, s) for t, s, _ in once] == [
        ("10:00", "SUCCEEDED"), ("11:00", "MISSED"), ("12:00", "MISSED"), ("13:00", "SUCCEEDED"),
    ]  # fmt: skip
    skip = await _down_three_hours("skip")
    assert [(t, s) for t, s, _ in skip] == [
        ("10:00", "SUCCEEDED"), ("11:00", "MISSED"), ("12:00", "MISSED"), ("13:00", "MISSED"),
    ]  # fmt: skip


async def test_starting_deadline_drops_fires_too_late() -> None:
    got = await _down_three_hours("catch_up", starting_deadline="60m")  # 12:00 is 90 min late
    assert [(t, s) for t, s, _ in got] == [
        ("10:00", "SUCCEEDED"), ("11:00", "MISSED"), ("12:00", "MISSED"), ("13:00", "SUCCEEDED"),
    ]  # fmt: skip


async def test_retries_back_off_then_dead_letter_then_redrive() -> None:
    async with SchedulerHarness(start="2026-01-01T00:00:00Z", seed=7) as h:
        failing = True

        @h.handler("flaky")
        async def flaky(ctx: Context, payload: Any) -> str:
            if failing:
                raise RuntimeError(f"boom {ctx.attempt}")
            return "done"

        job = await h.create_job("flaky", schedule="@at 2026-01-01T00:00:10Z", handler="flaky",
                                 max_attempts=4, retry_initial="10s", retry_max="5m")  # fmt: skip
        await h.run_until_idle()
        await h.advance(seconds=15)
        await h.run_until_idle()
        tries = h.attempts(job)
        assert [(a.attempt, a.outcome, a.error) for a in tries] == [
            (n, "FAILED", f"RuntimeError: boom {n}") for n in (1, 2, 3, 4)
        ]
        gaps = [(b.started_ms - a.finished_ms) / 1000 for a, b in itertools.pairwise(tries)]
        # Full jitter: each wait is drawn from [0, 10 s * 2^(n-1)].
        assert all(0 <= g <= 10 * 2**n for n, g in enumerate(gaps))
        [dead] = h.runs(job)
        assert (dead.state, dead.attempt, dead.error) == ("DEAD", 4, "RuntimeError: boom 4")
        assert [r.execution_id for r in await h.dead_letters(job)] == [dead.execution_id]
        failing = False
        assert await h.redrive(job) == 1
        await h.run_until_idle()
        [run] = h.runs(job)
        assert (run.state, run.trigger, run.result) == ("SUCCEEDED", "REDRIVE", "done")
        assert await h.dead_letters() == []


async def test_backoff_is_deterministic_per_seed() -> None:
    async def waits(seed: int) -> list[int]:
        async with SchedulerHarness(seed=seed) as h:

            @h.handler("fail")
            async def fail(ctx: Context, payload: Any) -> None:
                raise RuntimeError("no")

            job = await h.create_job("j", schedule="@after 1s", handler="fail", max_attempts=5,
                                     retry_initial="1m", retry_max="1h")  # fmt: skip
            await h.run_until_idle()
            return [a.started_ms for a in h.attempts(job)]

    assert await waits(1) == await waits(1)
    assert await waits(1) != await waits(2)


async def test_permanent_error_is_dead_at_once() -> None:
    async with SchedulerHarness() as h:

        @h.handler("bad")
        def bad(ctx: Context, payload: Any) -> None:  # a sync handler, as on a worker
            raise PermanentError("invalid input")

        job = await h.create_job("j", schedule="@after 5s", handler="bad", max_attempts=5)
        await h.run_until_idle()
        [run] = h.runs(job)
        assert (run.state, run.attempt, run.error) == ("DEAD", 1, "PermanentError: invalid input")


async def test_overlap_forbid_skips_fires_while_one_runs() -> None:
    async with SchedulerHarness(start="2026-01-01T00:00:30Z") as h:

        @h.handler("slow")
        async def slow(ctx: Context, payload: Any) -> None:
            await h.sleep(90)  # virtual time

        job = await h.create_job("slow", schedule="* * * * *", handler="slow",
                                 overlap="forbid")  # fmt: skip
        await h.advance(minutes=4)
        got = [(r.scheduled_at.strftime("%H:%M"), r.state) for r in h.runs(job)]
        assert got == [
            ("00:01", "SUCCEEDED"), ("00:02", "SKIPPED"), ("00:03", "SUCCEEDED"),
            ("00:04", "SKIPPED"),
        ]  # fmt: skip
        first = h.runs(job)[0]
        assert first.finished_ms - first.started_ms == 90_000


async def test_timeout_cancels_a_slow_handler() -> None:
    async with SchedulerHarness() as h:

        @h.handler("slow")
        async def slow(ctx: Context, payload: Any) -> None:
            await h.sleep(60)

        job = await h.create_job("j", schedule="@after 1s", handler="slow", timeout="10s",
                                 max_attempts=2, retry_initial="1s")  # fmt: skip
        await h.run_until_idle()
        assert [a.outcome for a in h.attempts(job)] == ["TIMED_OUT", "TIMED_OUT"]
        assert [r.state for r in h.runs(job)] == ["DEAD"]


async def test_pause_and_resume() -> None:
    async with SchedulerHarness(start="2026-01-01T00:00:30Z") as h:
        h.add_handler("ok", _ok)
        job = await h.create_job("hourly", schedule="0 * * * *", handler="ok")
        await h.advance(hours=2, minutes=30)
        await h.pause_job(job)
        await h.advance(hours=3)
        await h.resume_job(job)
        await h.advance(hours=2)
        hours = [r.scheduled_at.hour for r in h.runs(job)]
        assert hours == [1, 2, 6, 7]  # nothing while paused, no catch-up after it


async def test_context_fields_payload_and_tokens() -> None:
    async with SchedulerHarness(start="2026-01-01T00:00:00Z") as h:
        seen: list[tuple[str, int, int, int, Any]] = []

        @h.handler("inspect")
        async def inspect(ctx: Context, payload: Any) -> dict[str, int]:
            seen.append((ctx.execution_id, ctx.attempt, ctx.fencing_token, ctx.scheduled_ms,
                         payload))  # fmt: skip
            if ctx.attempt == 1:
                raise ValueError("first try fails")
            return {"n": ctx.attempt}

        job = await h.create_job("j", schedule="@at 2026-01-01T00:01:00Z", handler="inspect",
                                 payload={"to": "ops"}, retry_initial="1s")  # fmt: skip
        await h.run_until_idle()
        fire = int(_utc("2026-01-01T00:01:00Z").timestamp() * 1000)
        assert [(e, a, s, p) for e, a, _, s, p in seen] == [
            (f"{job.id}@{fire}", 1, fire, {"to": "ops"}),
            (f"{job.id}@{fire}", 2, fire, {"to": "ops"}),
        ]
        assert seen[0][2] < seen[1][2]  # every hand-out gets a larger token
        [run] = h.runs(job)
        assert (run.state, run.attempt, run.result, run.fencing_token) == (
            "SUCCEEDED", 2, {"n": 2}, seen[1][2],
        )  # fmt: skip


async def test_trigger_runs_with_its_payload() -> None:
    async with SchedulerHarness() as h:
        got: list[Any] = []

        @h.handler("echo")
        async def echo(ctx: Context, payload: Any) -> None:
            got.append(payload)

        job = await h.create_job("j", schedule="0 0 1 1 *", handler="echo", payload="job's")
        eid = await h.trigger_job(job, payload={"once": True})
        await h.run_until_idle()
        assert got == [{"once": True}]
        assert [(r.execution_id, r.trigger) for r in h.runs(job)] == [(eid, "MANUAL")]


async def test_api_errors_and_idempotency_are_the_clients() -> None:
    async with SchedulerHarness() as h:
        with pytest.raises(InvalidArgument) as err:
            await h.create_job("bad", schedule="61 * * * *", handler="ok")
        assert err.value.field == "job.schedule.expr"
        a = await h.create_job("j", schedule="@every 1h", handler="ok", idempotency_key="k")
        b = await h.create_job("j", schedule="@every 1h", handler="ok", idempotency_key="k")
        assert a.id == b.id


async def test_update_changes_the_schedule_from_the_next_fire() -> None:
    async with SchedulerHarness(start="2026-01-01T00:00:30Z") as h:
        h.add_handler("ok", _ok)
        job = await h.create_job("j", schedule="0 * * * *", handler="ok")
        await h.advance(hours=1, minutes=30)
        await h.update_job(job, schedule="*/15 * * * *")
        await h.advance(minutes=30)
        assert [r.scheduled_at.strftime("%H:%M") for r in h.runs(job)] == [
            "01:00", "01:45", "02:00",
        ]  # fmt: skip
        assert await h.delete_job(job) == 0
        await h.advance(hours=1)
        assert len(h.runs(job)) == 3


async def test_a_crash_adopts_claimed_fires_instead_of_giving_them_back() -> None:
    async with SchedulerHarness(start="2026-01-01T00:59:59Z") as h:
        h.add_handler("ok", _ok)
        job = await h.create_job("j", schedule="0 * * * *", handler="ok", misfire="skip")
        await h.advance(seconds=0.5)  # the 01:00 fire is claimed 1.5 s ahead
        [claimed] = await h.live_runs(job)
        await h.down(minutes=3, graceful=False)  # SIGKILL: its claim stays in the store
        [run] = h.runs(job)  # adopted under a new token and run late, whatever misfire says
        assert (run.state, run.attempt, run.scheduled_at.strftime("%H:%M")) == (
            "SUCCEEDED", 1, "01:00",
        )  # fmt: skip
        assert run.finished_at is not None and run.finished_at > _utc("2026-01-01T01:02:59Z")
        assert run.fencing_token > claimed.fencing_token  # re-tokened by the new epoch


async def test_a_fire_run_late_after_downtime_gets_its_whole_timeout() -> None:
    """A claimed fire taken over after a downtime longer than the job's timeout used to be
    dispatched with a deadline that had passed: TIMED_OUT before it started, its one attempt
    spent. Its timeout counts from when it is handed out."""
    async with SchedulerHarness(start="2026-01-01T00:59:59Z") as h:
        h.add_handler("ok", _ok)
        job = await h.create_job(
            "j", schedule="0 * * * *", handler="ok", timeout="1m", max_attempts=1
        )
        await h.advance(seconds=0.5)  # the 01:00 fire is claimed 1.5 s ahead
        await h.down(minutes=10, graceful=False)
        [run] = h.runs(job)
        assert (run.state, run.attempt) == ("SUCCEEDED", 1), run


async def test_two_days_of_a_per_minute_job_take_about_a_second() -> None:
    async with SchedulerHarness(start="2026-01-01T00:00:00Z") as h:
        h.add_handler("ok", _ok)
        job = await h.create_job("tick", schedule="* * * * *", handler="ok")
        began = time.perf_counter()
        await h.advance(days=2)
        elapsed = time.perf_counter() - began
        assert len(h.runs(job, state="SUCCEEDED")) == 2 * 24 * 60 + 1
        assert h.now - datetime(2026, 1, 1, tzinfo=UTC) == timedelta(days=2)
        assert elapsed < 20  # ~0.3 ms a run (docs/testing.md); generous for a shared machine


def test_the_docs_show_the_example_the_suite_runs() -> None:
    root = Path(__file__).resolve().parents[2]
    example = (root / "tests/examples/test_example_harness.py").read_text()
    body = example[example.index("from __future__") :]
    assert body in (root / "docs/testing.md").read_text()

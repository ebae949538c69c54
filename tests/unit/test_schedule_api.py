"""Parsing, validation, @every/@at/@after, misfires, jitter, backoff, durations."""

from __future__ import annotations

import random
import time
from datetime import datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

import schedd.schedule as sch
from schedd._errors import InvalidArgument, InvalidSchedule
from schedd.schedule import (
    MisfirePlan,
    ScheduleKind,
    format_duration_ms,
    jitter_offset_ms,
    parse_duration_ms,
    parse_schedule,
    pin_anchor,
    plan_misfires,
    retry_backoff_ms,
    validate_timezone,
)


def _ms(text: str) -> int:
    return int(datetime.fromisoformat(text).timestamp() * 1000)


def test_public_api() -> None:
    assert set(sch.__all__) == {
        "parse_schedule", "Schedule", "ScheduleKind", "MisfirePlan", "plan_misfires",
        "jitter_offset_ms", "retry_backoff_ms", "parse_duration_ms", "format_duration_ms",
        "validate_timezone", "pin_anchor", "describe_schedule",
    }  # fmt: skip


@pytest.mark.parametrize(
    ("expr", "tz", "field", "needle"),
    [
        ("61 * * * *", "UTC", "schedule.expr", "minute value 61 out of range 0-59"),
        ("0 24 * * *", "UTC", "schedule.expr", "hour value 24 out of range"),
        ("0 0 0 * *", "UTC", "schedule.expr", "day-of-month value 0 out of range"),
        ("0 0 * 13 *", "UTC", "schedule.expr", "month value 13"),
        ("0 0 * * 8", "UTC", "schedule.expr", "day-of-week value 8"),
        ("0 5-1 * * *", "UTC", "schedule.expr", "reversed range 5-1"),
        ("*/0 * * * *", "UTC", "schedule.expr", "step 0"),
        ("* * * *", "UTC", "schedule.expr", "got 4"),
        ("* * * * * * *", "UTC", "schedule.expr", "got 7"),
        ("CRON_TZ=UTC 0 0 * * *", "UTC", "schedule.expr", "timezone field"),
        ("TZ=Europe/Berlin 0 0 * * *", "UTC", "schedule.expr", "timezone field"),
        ("0 0 30 2 *", "UTC", "schedule.expr", "never fires"),
        ("0 0 31 4,6,9,11 *", "UTC", "schedule.expr", "never fires"),
        ("0 0 LW-2 * *", "UTC", "schedule.expr", "day-of-month 'LW-2' is not supported"),
        ("0 0 * * foo", "UTC", "schedule.expr", "not a number or a known name"),
        ("@sometimes", "UTC", "schedule.expr", "unknown macro"),
        ("0 0 * * *", "Mars/Olympus", "schedule.timezone", "unknown time zone"),
        ("0 0 * * *", "../etc/passwd", "schedule.timezone", "invalid time zone"),
        ("0 0 * * *", "/etc/localtime", "schedule.timezone", "invalid time zone"),
        ("0 0 * * *", "Europe/ Berlin", "schedule.timezone", "invalid time zone"),
        ("0 0 * * *", "", "schedule.timezone", "empty"),
        ("@every 500ms", "UTC", "schedule.expr", "at least 1s"),
        ("@every 1s500ms", "UTC", "schedule.expr", "finer than one second"),
        ("@every soon", "UTC", "schedule.expr", "bad duration"),
        ("@after 0s", "UTC", "schedule.expr", "at least 1s"),
        ("@at 1969-12-31T23:00:00Z", "UTC", "schedule.expr", "outside 1970..2100"),
        ("@at 2101-01-01T00:00:00Z", "UTC", "schedule.expr", "outside 1970..2100"),
        ("@at 2026-12-24T18:00:00.5+01:00", "UTC", "schedule.expr", "finer than one second"),
        ("@at tomorrow", "UTC", "schedule.expr", "not an ISO-8601 time"),
    ],
)
def test_invalid(expr: str, tz: str, field: str, needle: str) -> None:
    with pytest.raises(InvalidSchedule) as ei:
        parse_schedule(expr, tz)
    assert ei.value.field == field
    assert needle in str(ei.value)


def test_validate_timezone() -> None:
    assert validate_timezone("utc") == "UTC"
    assert validate_timezone("Europe/Berlin") == "Europe/Berlin"
    with pytest.raises(InvalidSchedule):
        validate_timezone("Europe/..")


def test_names_lists_steps_six_fields() -> None:
    s = parse_schedule("0 0 9 * jan-mar mon,FRI")
    assert s.kind is ScheduleKind.CRON
    got = list(s.fires(_ms("2025-01-01T00:00:00Z"), limit=3))
    assert got == [_ms("2025-01-03T09:00:00Z"), _ms("2025-01-06T09:00:00Z"),
                   _ms("2025-01-10T09:00:00Z")]  # fmt: skip
    s6 = parse_schedule("*/20 0 12 * * *")
    assert list(s6.fires(_ms("2025-01-01T00:00:00Z"), limit=3))[-1] == _ms("2025-01-01T12:00:40Z")
    sunday7 = parse_schedule("0 0 * * 7")
    assert sunday7.next_fire(_ms("2025-01-01T00:00:00Z")) == _ms("2025-01-05T00:00:00Z")


def test_dom_dow_or_rule() -> None:
    s = parse_schedule("0 0 13 * fri")  # the 13th OR any Friday (Vixie cron)
    got = list(s.fires(_ms("2025-06-01T00:00:00Z"), limit=3))
    assert got == [_ms("2025-06-06T00:00:00Z"), _ms("2025-06-13T00:00:00Z"),
                   _ms("2025-06-20T00:00:00Z")]  # fmt: skip


def test_every_after_at() -> None:
    e = parse_schedule("@every 10s", anchor_ms=1_000)
    assert e.kind is ScheduleKind.EVERY and not e.one_shot
    assert list(e.fires(0, limit=2)) == [11_000, 21_000]
    assert e.next_fire(11_000) == 21_000 and e.next_fire(11_001) == 21_000
    a = parse_schedule("@after 90s", anchor_ms=5_000)
    assert a.one_shot and a.next_fire(0) == 95_000 and a.next_fire(95_000) is None
    at = parse_schedule("@at 2026-12-24T18:00:00+01:00")
    assert at.one_shot and at.next_fire(0) == _ms("2026-12-24T17:00:00Z")
    local = parse_schedule("@at 2025-03-09T02:30:00", "America/New_York")  # in the gap
    assert local.next_fire(0) == _ms("2025-03-09T07:00:00Z")
    fold = parse_schedule("@at 2025-11-02T01:30:00", "America/New_York")
    assert fold.next_fire(0) == _ms("2025-11-02T01:30:00-04:00")


def test_an_explicit_anchor_replaces_the_creation_time() -> None:
    t0 = _ms("2026-01-01T00:05:00.250Z")
    for created in (0, 1_000, t0 + 7_777):  # wherever the job is created, the same fires
        e = parse_schedule("@every 1h from 2026-01-01T00:05:00.250Z", anchor_ms=created)
        assert e.next_fire(t0 + 10) == t0 + 3_600_000
    a = parse_schedule("@after 90s from 2026-01-01T01:00:00+01:00", anchor_ms=123)
    assert a.next_fire(0) == _ms("2026-01-01T00:01:30Z")
    assert pin_anchor("@every 30s", t0) == "@every 30s from 2026-01-01T00:05:00.250Z"
    assert pin_anchor(" @after 2m ", 0) == "@after 2m from 1970-01-01T00:00:00Z"
    for fixed in ("*/5 * * * *", "@at 2026-12-24T18:00:00Z", "@every 1m from 2026-01-01T00:00:00Z"):
        assert pin_anchor(fixed, t0) == fixed
    pinned = parse_schedule(pin_anchor("@every 7s", 1_234), anchor_ms=999_999)
    assert list(pinned.fires(0, limit=2)) == [8_234, 15_234]


@pytest.mark.parametrize(
    ("expr", "needle"),
    [
        ("@every 1h from 2026-01-01T00:05:00", "needs a UTC offset"),
        ("@every 1h from soon", "not an ISO-8601 time"),
        ("@every 1h from 2026-01-01T00:00:00.0001Z", "finer than a millisecond"),
        ("@after 1s from 2200-01-01T00:00:00Z", "outside 1970..2100"),
        ("@every 500ms from 2026-01-01T00:00:00Z", "at least 1s"),
    ],
)
def test_bad_anchors_are_refused(expr: str, needle: str) -> None:
    with pytest.raises(InvalidSchedule, match=needle):
        parse_schedule(expr)


def test_schedule_is_immutable_and_hashable() -> None:
    s = parse_schedule("0 9 * * 1-5", "Europe/Berlin")
    with pytest.raises(AttributeError):
        s.expr = "x"  # type: ignore[misc]
    assert s == parse_schedule("0 9 * * 1-5", "Europe/Berlin")
    assert len({s, parse_schedule("0 9 * * 1-5", "Europe/Berlin")}) == 1


# -- misfires ----------------------------------------------------------------------------
MIN = 60_000
HOURLY = parse_schedule("0 * * * *")
T0 = _ms("2025-01-01T00:00:00Z")


def _plan(mode: str, **kw: int) -> MisfirePlan:
    return plan_misfires(HOURLY, cursor_ms=T0, now_ms=T0 + 5 * 60 * MIN + 500, mode=mode, **kw)


def test_misfire_catch_up() -> None:
    p = _plan("catch_up", catch_up_limit=2)
    h = 60 * MIN
    assert p.run == [T0 + 3 * h, T0 + 4 * h, T0 + 5 * h]  # 5h is on time (500 ms late)
    assert [f for f, _ in p.missed] == [T0 + h, T0 + 2 * h]
    assert all(r == "catch-up limit 2 exceeded" for _, r in p.missed)
    assert p.missed_not_listed == 0 and p.next_fire_ms == T0 + 6 * h


def test_misfire_once_and_skip() -> None:
    h = 60 * MIN
    once = _plan("once")
    assert once.run == [T0 + 4 * h, T0 + 5 * h]
    assert once.missed[0][1] == "coalesced into the fire at 2025-01-01T04:00:00Z"
    assert len(once.missed) == 3
    skip = _plan("skip")
    assert skip.run == [T0 + 5 * h]
    assert [r for _, r in skip.missed] == ["misfire policy skip"] * 4


def test_misfire_starting_deadline() -> None:
    h = 60 * MIN
    p = _plan("catch_up", starting_deadline_ms=2 * h + 1000)
    assert p.run == [T0 + 3 * h, T0 + 4 * h, T0 + 5 * h]
    assert p.missed[0] == (T0 + h, "starting deadline 2h1s exceeded: 4h500ms late")
    assert len(p.missed) == 2


def test_misfire_nothing_due_and_bad_mode() -> None:
    p = plan_misfires(HOURLY, cursor_ms=T0, now_ms=T0, mode="once")
    assert p == MisfirePlan([], [], 0, T0 + 60 * MIN)
    with pytest.raises(InvalidArgument):
        plan_misfires(HOURLY, cursor_ms=T0, now_ms=T0, mode="all")


def test_misfire_one_shot() -> None:
    at = parse_schedule("@after 30s", anchor_ms=T0)
    run = plan_misfires(at, cursor_ms=T0, now_ms=T0 + MIN, mode="once")
    assert run.run == [T0 + 30_000] and run.next_fire_ms is None
    skip = plan_misfires(at, cursor_ms=T0, now_ms=T0 + MIN, mode="skip")
    assert skip.run == [] and skip.missed == [(T0 + 30_000, "misfire policy skip")]
    late = plan_misfires(at, cursor_ms=T0, now_ms=T0 + MIN, mode="catch_up",
                         starting_deadline_ms=10_000)  # fmt: skip
    assert late.run == [] and "starting deadline 10s exceeded: 30s late" in late.missed[0][1]


@pytest.mark.parametrize("expr", ["* * * * * *", "@every 1s"])
def test_misfire_per_second_job_down_a_day_is_fast(expr: str) -> None:
    s = parse_schedule(expr, "Europe/Berlin")
    now = T0 + 86_400_000
    t = time.perf_counter()
    p = plan_misfires(s, cursor_ms=T0, now_ms=now, mode="catch_up")
    assert time.perf_counter() - t < 0.2
    assert len(p.run) == 10 + 2  # 10 late + the on-time fires at now-1s and now
    assert p.run[-1] == now and p.run[0] == now - 11_000
    assert len(p.missed) == 1000 and p.missed[0][0] == T0 + 1000
    assert len(p.missed) + p.missed_not_listed + len(p.run) == 86_400
    assert p.next_fire_ms == now + 1000


def test_misfire_max_enumerate_caps_listing() -> None:
    p = plan_misfires(parse_schedule("@every 1s"), cursor_ms=0, now_ms=100_000, mode="skip",
                      max_enumerate=5)  # fmt: skip
    assert len(p.missed) == 5 and p.missed_not_listed == 100 - 2 - 5


# -- jitter, backoff, durations ----------------------------------------------------------
def test_jitter_deterministic_and_in_range() -> None:
    vals = [jitter_offset_ms("job-1", f, 5000) for f in range(0, 10_000_000, 10_000)]
    assert vals == [jitter_offset_ms("job-1", f, 5000) for f in range(0, 10_000_000, 10_000)]
    assert all(0 <= v < 5000 for v in vals) and len(set(vals)) > 500
    assert jitter_offset_ms("job-1", 0, 0) == 0 and jitter_offset_ms("job-1", 0, -5) == 0
    assert jitter_offset_ms("a", 1, 1) == 0
    assert jitter_offset_ms("job-1", 0, 10**9) == 25_902_230  # pinned: stable across runs


@given(st.integers(-3, 200), st.integers(0, 10_000), st.integers(0, 10**7), st.integers(0, 99))
def test_backoff_bounds(attempt: int, initial: int, cap: int, seed: int) -> None:
    d = retry_backoff_ms(attempt, initial_ms=initial, max_ms=cap, rng=random.Random(seed))
    bound = min(cap, initial * 2 ** (max(attempt, 1) - 1))
    assert 0 <= d <= bound


def test_backoff_grows() -> None:
    rng = random.Random(1)
    top = [max(retry_backoff_ms(a, initial_ms=100, max_ms=10**6, rng=rng) for _ in range(200))
           for a in (1, 3, 5)]  # fmt: skip
    assert top[0] <= 100 < top[1] <= 400 < top[2] <= 1600


@pytest.mark.parametrize(
    ("text", "ms"),
    [("90s", 90_000), ("1h30m", 5_400_000), ("250ms", 250), ("2d", 172_800_000),
     ("500", 500_000), (" 1m30s500ms ", 90_500), ("0s", 0)],
)  # fmt: skip
def test_parse_duration(text: str, ms: int) -> None:
    assert parse_duration_ms(text) == ms


@pytest.mark.parametrize("text", ["", "1x", "-5s", "1.5s", "30m1h", "1s1s", "s", "1 h"])
def test_parse_duration_rejects(text: str) -> None:
    with pytest.raises(InvalidArgument) as ei:
        parse_duration_ms(text, field="retry.initial")
    assert ei.value.field == "retry.initial"


def test_format_duration() -> None:
    assert format_duration_ms(5_400_000) == "1h30m"
    assert format_duration_ms(0) == "0s" and format_duration_ms(250) == "250ms"
    assert format_duration_ms(-1000) == "-1s"


@given(st.integers(0, 100 * 365 * 86_400_000))
def test_duration_round_trip(ms: int) -> None:
    assert parse_duration_ms(format_duration_ms(ms)) == ms

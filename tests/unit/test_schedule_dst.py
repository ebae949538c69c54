"""The DST rule against an independent brute-force oracle, plus hypothesis properties.

The oracle walks every local wall-clock minute of each local day with zoneinfo, matches the
cron fields (expanded by croniter, not by our parser) and applies Debian cron's rule
literally; seconds are expanded per minute (zone transitions fall on whole minutes).
"""

from __future__ import annotations

import functools
import itertools
from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from croniter import croniter
from hypothesis import given, settings
from hypothesis import strategies as st

from schedd.schedule import parse_schedule

ZONES = [
    "America/New_York",
    "Europe/London",
    "Europe/Berlin",
    "Australia/Sydney",
    "America/Santiago",
    "Asia/Jerusalem",
    "Pacific/Auckland",
    "America/St_Johns",
    "Australia/Lord_Howe",
    "UTC",
]
EXPRS = [
    "30 2 * * *",
    "0 1-3 * * *",
    "*/15 * * * *",
    "0 */2 * * *",
    "@hourly",
    "@daily",
    "15,45 0-3 * * *",
    "0 0 * * *",
    "59 23 * * *",
    "30 1 * * *",
    "0 9 * * 1-5",
    "*/20 1-2 * * *",
    "30 0 1 * sun",
    "10 */5 2 * * *",
    "0 30 2 * * *",
    "* 30 1 * * *",
]


def _wall_map(tz: str, day: date) -> list[tuple[datetime, list[int], int | None]]:
    """Per wall minute of ``day``: (wall, existing UTC instants, gap-end instant if none)."""
    return _wall_map_cached(tz, day.toordinal())


@functools.cache
def _wall_map_cached(tz: str, ordinal: int) -> list[tuple[datetime, list[int], int | None]]:
    z = ZoneInfo(tz)
    day = date.fromordinal(ordinal)
    out = []
    for i in range(1440):
        wall = datetime(day.year, day.month, day.day) + timedelta(minutes=i)
        insts = set()
        for fold in (0, 1):
            u = int(wall.replace(tzinfo=z, fold=fold).timestamp())
            if datetime.fromtimestamp(u, z).replace(tzinfo=None) == wall:
                insts.add(u)
        gap_end = None
        if not insts:
            lo = int(wall.replace(tzinfo=z, fold=1).timestamp())
            hi = int(wall.replace(tzinfo=z, fold=0).timestamp())
            lo, hi = min(lo, hi), max(lo, hi)
            after = datetime.fromtimestamp(hi, z).utcoffset()
            gap_end = next(
                u
                for u in range(lo - lo % 60, hi + 60, 60)
                if datetime.fromtimestamp(u, z).utcoffset() == after
            )
        out.append((wall, sorted(insts), gap_end))
    return out


def _fields(expr: str) -> tuple[list[set[int] | None], bool, bool, bool]:
    macros = {"@hourly": "0 * * * *", "@daily": "0 0 * * *"}
    text = macros.get(expr, expr)
    parts = text.split()
    six = len(parts) == 6
    expanded, _ = croniter.expand(text, second_at_beginning=six)
    # croniter returns minute, hour, dom, month, dow[, second]
    sets: list[set[int] | None] = [None if f == ["*"] else {int(v) for v in f} for f in expanded]
    if not six:
        sets.append({0})
    body = parts[1:] if six else parts
    fixed = not (body[0].startswith("*") or body[1].startswith("*"))
    return sets, fixed, body[2].startswith("*"), body[4].startswith("*")


def _match(s: set[int] | None, v: int) -> bool:
    return s is None or v in s


def oracle(expr: str, tz: str, days: list[date]) -> list[int]:
    """All fires (UTC ms) on the given local days, by the literal rule."""
    (mi, hr, dom, mon, dow, sec), fixed, dom_star, dow_star = _fields(expr)
    dows = None if dow is None else {d % 7 for d in dow}
    fires: set[int] = set()
    for day in days:
        dom_ok = _match(dom, day.day)
        dow_ok = _match(dows, day.isoweekday() % 7)
        day_ok = (dom_ok and dow_ok) if (dom_star or dow_star) else (dom_ok or dow_ok)
        if not (day_ok and _match(mon, day.month)):
            continue
        seconds = sorted(sec) if sec is not None else list(range(60))
        for wall, insts, gap_end in _wall_map(tz, day):
            if not (_match(hr, wall.hour) and _match(mi, wall.minute)):
                continue
            for s in seconds:
                if insts:
                    chosen = insts[:1] if fixed else insts
                    fires.update((u + s) * 1000 for u in chosen)
                elif fixed and gap_end is not None:
                    fires.add(gap_end * 1000)  # once per day: a set dedups the instant
    return sorted(fires)


def _transition_days(tz: str, year: int) -> list[date]:
    z = ZoneInfo(tz)
    out = []
    d = date(year, 1, 1)
    prev = datetime(year, 1, 1, tzinfo=z).utcoffset()
    while d.year == year:
        nxt = d + timedelta(days=1)
        off = datetime(nxt.year, nxt.month, nxt.day, tzinfo=z).utcoffset()
        if off != prev:
            out += [d - timedelta(days=1), d, nxt]
        prev, d = off, nxt
    return out or [date(year, 3, 30), date(year, 3, 31)]


def _windows(tz: str) -> list[list[date]]:
    """Runs of consecutive local days around each transition of 2024-2027."""
    days = sorted({d for y in (2024, 2025, 2026, 2027) for d in _transition_days(tz, y)})
    runs: list[list[date]] = []
    for d in days:
        if runs and (d - runs[-1][-1]).days == 1:
            runs[-1].append(d)
        else:
            runs.append([d])
    return runs


def ours(expr: str, tz: str, days: list[date]) -> list[int]:
    z = ZoneInfo(tz)
    first, last = days[0], days[-1] + timedelta(days=1)
    lo = int(datetime(first.year, first.month, first.day, tzinfo=z).timestamp()) - 1
    hi = int(datetime(last.year, last.month, last.day, tzinfo=z).timestamp())
    sched = parse_schedule(expr, tz)
    return list(sched.fires(lo * 1000, until_ms=hi * 1000 - 1))


@pytest.mark.parametrize("tz", ZONES)
def test_matches_oracle_around_transitions(tz: str) -> None:
    for expr in EXPRS:
        for run in _windows(tz):
            # Trim the oracle to the same UTC window (the days' edges may shift by DST).
            want = oracle(expr, tz, run)
            got = ours(expr, tz, run)
            z = ZoneInfo(tz)
            lo = datetime(run[0].year, run[0].month, run[0].day, tzinfo=z).timestamp() * 1000
            e = run[-1] + timedelta(days=1)
            hi = datetime(e.year, e.month, e.day, tzinfo=z).timestamp() * 1000
            want = [f for f in want if lo <= f < hi]
            assert got == want, (expr, tz, run[0])
            sched = parse_schedule(expr, tz)
            assert sched.count_fires(int(lo) - 1, int(hi) - 1) == len(got), (expr, tz, run[0])


def _ms(text: str) -> int:
    return int(datetime.fromisoformat(text).timestamp() * 1000)


def test_spring_forward_gap_fixed_time_runs_at_jump() -> None:
    s = parse_schedule("30 2 * * *", "America/New_York")
    assert s.fixed_time
    assert s.next_fire(_ms("2025-03-08T12:00:00Z")) == _ms("2025-03-09T07:00:00Z")
    assert s.next_fire(_ms("2025-03-09T07:00:00Z")) == _ms("2025-03-10T06:30:00Z")


def test_fall_back_fixed_time_runs_once_at_first_occurrence() -> None:
    s = parse_schedule("30 1 * * *", "America/New_York")
    fires = list(s.fires(_ms("2025-11-01T12:00:00Z"), limit=2))
    assert fires == [_ms("2025-11-02T01:30:00-04:00"), _ms("2025-11-03T01:30:00-05:00")]


def test_restart_inside_repeated_hour_does_not_refire() -> None:
    s = parse_schedule("30 1 * * *", "America/New_York")
    after = _ms("2025-11-02T01:30:00-04:00")
    assert s.next_fire(after) == _ms("2025-11-03T01:30:00-05:00")
    # Even a cursor inside the second 01:xx hour.
    assert s.next_fire(_ms("2025-11-02T01:10:00-05:00")) == _ms("2025-11-03T01:30:00-05:00")


def test_non_fixed_fires_both_repeats_and_none_in_gap() -> None:
    s = parse_schedule("*/30 * * * *", "America/New_York")
    assert not s.fixed_time
    fall = list(
        s.fires(_ms("2025-11-02T00:59:00-04:00"), until_ms=_ms("2025-11-02T02:00:00-05:00"))
    )
    want = [
        "01:00:00-04:00",
        "01:30:00-04:00",
        "01:00:00-05:00",
        "01:30:00-05:00",
        "02:00:00-05:00",
    ]
    assert fall == [_ms("2025-11-02T" + w) for w in want]
    spring = list(s.fires(_ms("2025-03-09T01:59:00-05:00"), limit=2))
    assert spring == [_ms("2025-03-09T03:00:00-04:00"), _ms("2025-03-09T03:30:00-04:00")]


def test_fixed_time_classification() -> None:
    fixed = ["30 2 * * *", "0 1-3 * * *", "@daily", "@weekly", "@monthly", "@yearly", "* 0 3 * * *"]
    for e in fixed:
        assert parse_schedule(e).fixed_time, e
    for e in ["*/15 * * * *", "0 */2 * * *", "@hourly", "* * * * * *", "0 * 3 * * *"]:
        assert not parse_schedule(e).fixed_time, e


def test_lord_howe_half_hour_shift() -> None:
    tz = "Australia/Lord_Howe"  # 02:00 -> 02:30 in October, 02:00 -> 01:30 in April
    s = parse_schedule("*/10 * * * *", tz)
    got = list(s.fires(_ms("2025-10-05T01:55:00+10:30"), limit=3))
    assert got == [
        _ms("2025-10-05T02:30:00+11:00"),
        _ms("2025-10-05T02:40:00+11:00"),
        _ms("2025-10-05T02:50:00+11:00"),
    ]
    f = parse_schedule("15 2 * * *", tz)
    jump = _ms("2025-10-05T02:30:00+11:00")
    assert f.next_fire(_ms("2025-10-04T12:00:00Z")) == jump
    assert f.next_fire(jump - 1) == jump  # cursor just before the jump instant
    assert f.count_fires(jump - 1, jump) == 1


ZONE_ST = st.sampled_from(ZONES)
EXPR_ST = st.sampled_from([*EXPRS, "* * * * *", "0 0 29 2 *", "0 12 * * sat,sun"])
START_ST = st.integers(_ms("2024-01-01T00:00:00Z"), _ms("2027-12-31T00:00:00Z"))


@settings(max_examples=150, deadline=None)
@given(EXPR_ST, ZONE_ST, START_ST)
def test_properties(expr: str, tz: str, after: int) -> None:
    s = parse_schedule(expr, tz)
    fires = list(s.fires(after, limit=40))
    assert fires and fires[0] > after
    assert all(a < b for a, b in itertools.pairwise(fires))
    z = ZoneInfo(tz)
    for f in fires:
        assert f % 1000 == 0
        local = datetime.fromtimestamp(f / 1000, z)
        # A fire is a real instant: its wall time round-trips (never inside a gap).
        assert int(local.timestamp() * 1000) == f
    for a, b in itertools.pairwise(fires):
        assert s.next_fire(a) == b
        assert s.next_fire(b - 1) == b
    assert s.count_fires(after, fires[-1]) == len(fires)
    for f in fires:  # counting from just before a fire (e.g. a gap fire) includes it
        assert s.count_fires(f - 1, f) == 1


@settings(max_examples=60, deadline=None)
@given(ZONE_ST, START_ST, st.integers(0, 86_400_000 * 3))
def test_count_matches_enumeration(tz: str, after: int, span: int) -> None:
    for expr in ("*/7 * * * *", "30 2 * * *", "0 1-3 * * *"):
        s = parse_schedule(expr, tz)
        assert s.count_fires(after, after + span) == len(
            list(s.fires(after, until_ms=after + span))
        )


def test_utc_strings() -> None:
    s = parse_schedule("0 0 1 * *")
    assert datetime.fromtimestamp(s.next_fire(0) / 1000, UTC) == datetime(1970, 2, 1, tzinfo=UTC)

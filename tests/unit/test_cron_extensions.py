"""Quartz-style day terms: L, L-n, LW, nW and ? in day-of-month; nL, n#k and ? in day-of-week.

Three kinds of checks: explicit dates worked out by hand (and with ``calendar``), oracle runs
against croniter and cronsim where their semantics are the Quartz ones, and a hypothesis
property against a brute-force day predicate written from the rules in docs/schedules.md.
"""

from __future__ import annotations

import calendar
import itertools
import time
from collections.abc import Callable, Iterator
from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from croniter import croniter
from cronsim import CronSim
from hypothesis import given, settings
from hypothesis import strategies as st

from schedd._errors import InvalidSchedule
from schedd.schedule import Schedule, parse_schedule

DAY_MS = 86_400_000


def _ms(text: str) -> int:
    return int(datetime.fromisoformat(text).timestamp() * 1000)


def _sched(expr: str, tz: str = "UTC", anchor: str = "2020-01-01T00:00:00+00:00") -> Schedule:
    return parse_schedule(expr, tz, anchor_ms=_ms(anchor))


def _dates(expr: str, start: str, end: str, tz: str = "UTC") -> list[date]:
    """Local dates of the fires in ``(start, end]`` (UTC ISO strings)."""
    z = ZoneInfo(tz)
    s = _sched(expr, tz, start)
    fires = s.fires(_ms(start), until_ms=_ms(end))
    return [datetime.fromtimestamp(f / 1000, z).date() for f in fires]


def _year(expr: str, year: int = 2026) -> list[date]:
    return _dates(expr, f"{year - 1}-12-31T12:00:00+00:00", f"{year}-12-31T23:59:59+00:00")


def _md(year: int, pairs: list[tuple[int, int]]) -> list[date]:
    return [date(year, m, d) for m, d in pairs]


# -- explicit examples ---------------------------------------------------------------------
LAST_FRIDAYS_2026 = _md(2026, [(1, 30), (2, 27), (3, 27), (4, 24), (5, 29), (6, 26), (7, 31),
                               (8, 28), (9, 25), (10, 30), (11, 27), (12, 25)])  # fmt: skip


@pytest.mark.parametrize("dow", ["5L", "5l", "FRIL", "friL", "fril", "5L,5L"])
def test_last_friday_of_each_month_2026(dow: str) -> None:
    assert _year(f"0 9 * * {dow}") == LAST_FRIDAYS_2026
    assert _year(f"0 9 ? * {dow}") == LAST_FRIDAYS_2026


def test_last_sunday_as_0l_and_7l() -> None:
    want = _md(2026, [(1, 25), (2, 22), (3, 29), (4, 26), (5, 31), (6, 28),
                      (7, 26), (8, 30), (9, 27), (10, 25), (11, 29), (12, 27)])  # fmt: skip
    assert _year("0 0 * * 0L") == _year("0 0 * * 7L") == _year("0 0 * * SUNL") == want


def test_last_day_and_offsets() -> None:
    lengths = [31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31]
    assert _year("0 0 L * *") == [date(2026, m, n) for m, n in enumerate(lengths, 1)]
    assert _year("0 0 L-3 * *") == [date(2026, m, n - 3) for m, n in enumerate(lengths, 1)]
    assert _year("0 0 L-0 * *") == _year("0 0 L * *")
    assert _year("0 0 L feb *", 2028) == [date(2028, 2, 29)]  # leap year
    assert _year("0 0 L-28 feb *", 2028) == [date(2028, 2, 1)]
    assert _year("0 0 L-28 feb *", 2026) == []  # L-28 is before the 1st of a 28-day February
    # L-30 is the 1st of 31-day months only.
    assert _year("0 0 L-30 * *") == _md(2026, [(1, 1), (3, 1), (5, 1), (7, 1), (8, 1), (10, 1),
                                               (12, 1)])  # fmt: skip


def test_last_weekday_of_each_month_2026() -> None:
    want = _md(2026, [(1, 30), (2, 27), (3, 31), (4, 30), (5, 29), (6, 30),
                      (7, 31), (8, 31), (9, 30), (10, 30), (11, 30), (12, 31)])  # fmt: skip
    assert _year("0 0 LW * *") == _year("0 0 lw * ?") == want


def test_nearest_weekday_15w_2026() -> None:
    got = _year("0 0 15W * *")
    # 15th on a Sunday (Feb, Mar, Nov) -> Monday 16th; on a Saturday (Aug) -> Friday 14th.
    want = _md(2026, [(1, 15), (2, 16), (3, 16), (4, 15), (5, 15), (6, 15),
                      (7, 15), (8, 14), (9, 15), (10, 15), (11, 16), (12, 15)])  # fmt: skip
    assert got == want
    assert all(d.weekday() < 5 for d in got)


def test_nearest_weekday_never_leaves_the_month() -> None:
    # 2022-01-01 and 2022-10-01 are Saturdays: 1W is Monday the 3rd, not Friday in the
    # previous month. 2026-02-01 is a Sunday: Monday the 2nd.
    assert _dates("0 0 1W * *", "2021-12-15T00:00:00Z", "2022-01-31T00:00:00Z") == [
        date(2022, 1, 3)
    ]
    assert _dates("0 0 1W * *", "2022-09-15T00:00:00Z", "2022-10-31T00:00:00Z") == [
        date(2022, 10, 3)
    ]
    assert _dates("0 0 1W * *", "2026-01-15T00:00:00Z", "2026-02-28T00:00:00Z") == [
        date(2026, 2, 2)
    ]
    # 2022-07-31 and 2021-10-31 are Sundays: 31W is Friday the 29th, not Monday the 1st.
    assert _dates("0 0 31W * *", "2022-07-01T00:00:00Z", "2022-08-15T00:00:00Z") == [
        date(2022, 7, 29)
    ]
    assert _dates("0 0 31W * *", "2021-10-01T00:00:00Z", "2021-11-15T00:00:00Z") == [
        date(2021, 10, 29)
    ]
    # 2026-01-31 is a Saturday: Friday the 30th. 31W skips months without a 31st (as 31 does).
    assert _year("0 0 31W * *") == _md(2026, [(1, 30), (3, 31), (5, 29), (7, 31), (8, 31),
                                              (10, 30), (12, 31)])  # fmt: skip
    # 30W in February never exists; the day list check accounts for it.
    assert _year("0 0 30W * *")[:2] == [date(2026, 1, 30), date(2026, 3, 30)]


def test_second_monday_across_2026() -> None:
    want = _md(2026, [(1, 12), (2, 9), (3, 9), (4, 13), (5, 11), (6, 8),
                      (7, 13), (8, 10), (9, 14), (10, 12), (11, 9), (12, 14)])  # fmt: skip
    for dow in ("MON#2", "mon#2", "1#2", "1#2,1#2"):
        assert _year(f"0 9 * * {dow}") == want, dow
        assert _year(f"0 9 ? * {dow}") == want, dow


def test_fifth_friday_that_does_not_exist_does_not_fire() -> None:
    assert _year("0 0 * * 5#5") == _md(2026, [(1, 30), (5, 29), (7, 31), (10, 30)])
    assert _year("0 0 * * FRI#5") == _year("0 0 * * 5#5")
    # February 2026 has four Fridays: the next 5th Friday after January is in May.
    s = _sched("0 0 * * 5#5")
    assert s.next_fire(_ms("2026-01-30T00:00:00Z")) == _ms("2026-05-29T00:00:00Z")
    # A 5th Sunday in February needs a leap year whose Feb 1 is a Sunday: 2032, then 2060.
    feb = _sched("0 0 * feb 0#5", anchor="2030-01-01T00:00:00Z")
    assert feb.next_fire(_ms("2030-01-01T00:00:00Z")) == _ms("2032-02-29T00:00:00Z")
    assert feb.next_fire(_ms("2032-02-29T00:00:00Z")) == _ms("2060-02-29T00:00:00Z")


def test_first_and_seventh_day_numbers() -> None:
    first_sundays = _year("0 0 * * 0#1")
    assert first_sundays == _year("0 0 * * 7#1") == _year("0 0 * * sun#1")
    assert [d.day for d in first_sundays] == [4, 1, 1, 5, 3, 7, 5, 2, 6, 4, 1, 6]


def test_question_mark_is_star_and_the_other_field_decides() -> None:
    assert _year("0 0 ? * 1") == _year("0 0 * * 1")
    assert _year("0 0 1 * ?") == _year("0 0 1 * *")
    assert _year("0 0 ? * ?") == _year("0 0 * * *")
    # With a plain restricted dow, `1 * mon` fires on the 1st OR Mondays; `1 * ?` does not.
    assert len(_year("0 0 1 * mon")) > len(_year("0 0 1 * ?")) == 12


def test_lists_mix_special_and_plain_terms() -> None:
    lengths = [31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31]
    got = _year("0 0 1,15,L * *")
    want = sorted(date(2026, m, d) for m, n in enumerate(lengths, 1) for d in (1, 15, n))
    assert got == want
    assert _year("0 0 L,L-1 * *") == sorted(
        date(2026, m, d) for m, n in enumerate(lengths, 1) for d in (n - 1, n)
    )
    assert _year("0 0 1W,15W * *") == sorted([*_year("0 0 1W * *"), *_year("0 0 15W * *")])
    assert _year("0 0 LW,L * *") == sorted({*_year("0 0 LW * *"), *_year("0 0 L * *")})
    mixed = _year("0 0 * * 1#1,5L,3")
    assert mixed == sorted({*_year("0 0 * * 1#1"), *_year("0 0 * * 5L"), *_year("0 0 * * 3")})


def test_or_rule_with_special_terms() -> None:
    # Both restricted: last day of the month OR last Friday.
    assert _year("0 0 L * 5L") == sorted({*_year("0 0 L * *"), *LAST_FRIDAYS_2026})
    assert _year("0 0 15W * MON#1") == sorted({*_year("0 0 15W * *"), *_year("0 0 * * 1#1")})
    assert _year("0 0 13 * fri#2") == sorted({*_year("0 0 13 * *"), *_year("0 0 * * 5#2")})
    # A field starting with * keeps the AND rule: last Fridays on odd days only.
    assert _year("0 0 */2 * 5L") == [d for d in LAST_FRIDAYS_2026 if d.day % 2]
    assert _year("0 0 L * */1") == _year("0 0 L * *")


def test_month_names_and_six_fields_combine() -> None:
    assert _year("0 9 * jan,jul MON#2") == [date(2026, 1, 12), date(2026, 7, 13)]
    assert _year("0 9 LW feb-mar *") == [date(2026, 2, 27), date(2026, 3, 31)]
    s = _sched("15 30 9 L * *")
    assert s.next_fire(_ms("2026-02-01T00:00:00Z")) == _ms("2026-02-28T09:30:15Z")


def test_times_on_chosen_days() -> None:
    s = _sched("0,30 8-9 LW * *")
    got = list(s.fires(_ms("2026-02-01T00:00:00Z"), limit=5))
    want = ["02-27T08:00", "02-27T08:30", "02-27T09:00", "02-27T09:30", "03-31T08:00"]
    assert got == [_ms(f"2026-{w}:00Z") for w in want]
    assert s.count_fires(_ms("2026-01-01T00:00:00Z"), _ms("2027-01-01T00:00:00Z")) == 48


# -- the DST rule applies unchanged on the chosen days --------------------------------------
def test_dst_second_sunday_of_march_new_york() -> None:
    # US clocks jump 02:00 -> 03:00 on the second Sunday of March: 02:30 does not exist and a
    # fixed-time job runs at the first instant after the jump (03:00 EDT = 07:00Z).
    s = _sched("30 2 * mar SUN#2", "America/New_York")
    assert s.fixed_time
    got = list(s.fires(_ms("2025-01-01T00:00:00Z"), limit=3))
    assert got == [_ms(f"{d}T07:00:00Z") for d in ("2025-03-09", "2026-03-08", "2027-03-14")]


def test_dst_first_sunday_of_november_new_york() -> None:
    s = _sched("30 1 * 11 0#1", "America/New_York")  # 01:30 happens twice: first one only
    got = list(s.fires(_ms("2025-01-01T00:00:00Z"), limit=2))
    assert got == [_ms("2025-11-02T01:30:00-04:00"), _ms("2026-11-01T01:30:00-04:00")]
    every = _sched("*/30 1 * 11 0#1", "America/New_York")  # not fixed-time: both
    got = list(every.fires(_ms("2025-11-02T00:00:00-04:00"), limit=4))
    times = ["01:00:00-04:00", "01:30:00-04:00", "01:00:00-05:00", "01:30:00-05:00"]
    assert got == [_ms(f"2025-11-02T{t}") for t in times]


def test_dst_last_sundays_berlin() -> None:
    spring = _sched("30 2 * 3 0L", "Europe/Berlin")  # 02:00 -> 03:00 on the last Sunday
    got = list(spring.fires(_ms("2025-01-01T00:00:00Z"), limit=3))
    assert got == [_ms(f"{d}T01:00:00Z") for d in ("2025-03-30", "2026-03-29", "2027-03-28")]
    fall = _sched("30 2 * oct SUNL", "Europe/Berlin")  # 02:30 repeats: the CEST one only
    got = list(fall.fires(_ms("2025-01-01T00:00:00Z"), limit=2))
    assert got == [_ms("2025-10-26T02:30:00+02:00"), _ms("2026-10-25T02:30:00+02:00")]
    # Last day of March 2024 was the Berlin spring-forward Sunday.
    last = _sched("30 2 L 3 *", "Europe/Berlin")
    assert last.next_fire(_ms("2024-01-01T00:00:00Z")) == _ms("2024-03-31T03:00:00+02:00")


# -- oracles: croniter and cronsim where they read the term as Quartz does -------------------
ORACLE_ZONES = ["America/New_York", "Europe/Berlin", "Australia/Sydney", "UTC"]
# (ours, croniter's spelling). croniter writes the last weekday as L5; it clamps nW past the
# month's end to the last day (31W in June -> 30th) where we do not fire, so nW stays <= 28
# here; it answers `#` and W with a restricted day-of-month by AND or not at all, so those
# pairs keep day-of-month `*` or `?`.
CRONITER_PAIRS = [
    ("0 12 L * *", "0 12 L * *"),
    ("30 9 1,15,L * *", "30 9 1,15,L * *"),
    ("0 12 L * ?", "0 12 L * ?"),
    ("45 23 L 2,8 *", "45 23 L 2,8 *"),
    ("0 12 15W * *", "0 12 15W * *"),
    ("0 12 1W * *", "0 12 1W * *"),
    ("0 12 28W * *", "0 12 28W * *"),
    ("0 12 * * 5L", "0 12 * * L5"),
    ("0 12 * * FRIL", "0 12 * * L5"),
    ("0 12 * * 0L,1L", "0 12 * * L0,L1"),
    ("30 9 * * MON#2", "30 9 * * mon#2"),
    ("30 9 ? * 5#5", "30 9 * * 5#5"),
    ("0 12 * * 1#2,1#4", "0 12 * * 1#2,1#4"),
    ("0 12 * jan-jun 3#3", "0 12 * jan-jun 3#3"),
    ("5 0 12 L * *", "5 0 12 L * *"),
]
# cronsim reads 5L and LW as Quartz does and applies the OR rule to them.
CRONSIM_EXPRS = [
    "0 12 LW * *",
    "0 12 * * 5L",
    "0 12 1 * 5L",
    "0 12 L * 1#2",
    "0 12 15 * 5L,1#1",
    "0 12 */2 * 5L",
    "0 12 1,L * 3#3",
    "0 12 LW * 0L",
]
ORACLE_START = datetime(2024, 1, 1)
ORACLE_END = datetime(2034, 1, 1)


def _take_until(it: Iterator[datetime], end: datetime) -> list[int]:
    out = []
    for dt in it:
        if dt >= end:
            return out
        out.append(int(dt.timestamp()) * 1000)
    return out


def _ours_between(expr: str, tz: str, start: datetime, end: datetime) -> list[int]:
    s = parse_schedule(expr, tz, anchor_ms=int(start.timestamp() * 1000))
    return list(s.fires(int(start.timestamp() * 1000), until_ms=int(end.timestamp() * 1000) - 1))


def _croniter_fires(expr: str, start: datetime) -> Iterator[datetime]:
    it = croniter(expr, start, second_at_beginning=len(expr.split()) == 6)
    while True:
        yield it.get_next(datetime)


@pytest.mark.parametrize("tz", ORACLE_ZONES)
@pytest.mark.parametrize(("ours", "theirs"), CRONITER_PAIRS)
def test_matches_croniter_over_ten_years(tz: str, ours: str, theirs: str) -> None:
    z = ZoneInfo(tz)
    start, end = ORACLE_START.replace(tzinfo=z), ORACLE_END.replace(tzinfo=z)
    want = _take_until(_croniter_fires(theirs, start), end)
    got = _ours_between(ours, tz, start, end)
    assert len(got) >= 20  # at least two fires a year
    assert got == want


@pytest.mark.parametrize("tz", ORACLE_ZONES)
@pytest.mark.parametrize("expr", CRONSIM_EXPRS)
def test_matches_cronsim_over_ten_years(tz: str, expr: str) -> None:
    z = ZoneInfo(tz)
    start, end = ORACLE_START.replace(tzinfo=z), ORACLE_END.replace(tzinfo=z)
    want = _take_until(CronSim(expr, start), end)
    got = _ours_between(expr, tz, start, end)
    assert len(got) >= 60  # at least six fires a year
    assert got == want


# -- property: a brute-force day predicate written from the documented rules ---------------
def _month_of(d: date) -> list[date]:
    n = calendar.monthrange(d.year, d.month)[1]
    return [date(d.year, d.month, i) for i in range(1, n + 1)]


def _is_weekday(d: date) -> bool:
    return d.weekday() < 5


def _dom_term(term: str) -> Callable[[date], bool]:
    """One day-of-month list item as a predicate, straight from the definitions."""
    u = term.upper()
    if u in ("*", "?"):
        return lambda d: True
    if u == "L":
        return lambda d: (d + timedelta(days=1)).month != d.month
    if u.startswith("L-"):
        k = int(u[2:])
        return lambda d: (
            (d + timedelta(days=k)).month == d.month
            and (d + timedelta(days=k + 1)).month != d.month
        )
    if u == "LW":
        return lambda d: _is_weekday(d) and not any(_is_weekday(o) for o in _month_of(d) if o > d)
    if u.endswith("W"):
        n = int(u[:-1])

        def nearest(d: date) -> bool:
            month = _month_of(d)
            if n > len(month):
                return False
            target = month[n - 1]
            return d == min((o for o in month if _is_weekday(o)), key=lambda o: abs(o - target))

        return nearest
    if "/" in u:
        a, _, step = u.partition("/")
        lo = 1 if a == "*" else int(a)
        return lambda d: d.day >= lo and (d.day - lo) % int(step) == 0
    if "-" in u:
        a, _, b = u.partition("-")
        return lambda d: int(a) <= d.day <= int(b)
    return lambda d: d.day == int(u)


_DOW_NUM = {"SUN": 0, "MON": 1, "TUE": 2, "WED": 3, "THU": 4, "FRI": 5, "SAT": 6}


def _cron_dow(d: date) -> int:
    return d.isoweekday() % 7


def _dow_raw(tok: str) -> int:
    """A weekday number or name, 7 not folded (so 5-7 is Friday to Sunday)."""
    return _DOW_NUM[tok.upper()] if tok.upper() in _DOW_NUM else int(tok)


def _dow_num(tok: str) -> int:
    return _dow_raw(tok) % 7


def _dow_term(term: str) -> Callable[[date], bool]:
    u = term.upper()
    if u in ("*", "?"):
        return lambda d: True
    if "#" in u:
        w_s, _, k_s = u.partition("#")
        w, k = _dow_num(w_s), int(k_s)
        return lambda d: (
            _cron_dow(d) == w and sum(1 for o in _month_of(d) if o <= d and _cron_dow(o) == w) == k
        )
    if u.endswith("L"):
        w = _dow_num(u[:-1])
        return lambda d: _cron_dow(d) == w and (d + timedelta(days=7)).month != d.month
    if "/" in u:
        a, _, step = u.partition("/")
        days = {v % 7 for v in range(0 if a == "*" else _dow_raw(a), 8, int(step))}
        return lambda d: _cron_dow(d) in days
    if "-" in u:
        a, _, b = u.partition("-")
        days = {v % 7 for v in range(_dow_raw(a), _dow_raw(b) + 1)}
        return lambda d: _cron_dow(d) in days
    return lambda d: _cron_dow(d) == _dow_num(u)


def _day_predicate(dom: str, month: set[int], dow: str) -> Callable[[date], bool]:
    doms = [_dom_term(t) for t in dom.split(",")]
    dows = [_dow_term(t) for t in dow.split(",")]
    both_restricted = not (dom.startswith(("*", "?")) or dow.startswith(("*", "?")))

    def ok(d: date) -> bool:
        if d.month not in month:
            return False
        a, b = any(p(d) for p in doms), any(p(d) for p in dows)
        return (a or b) if both_restricted else (a and b)

    return ok


DOM_ITEMS = ["1", "15", "31", "29", "L", "L-1", "L-3", "L-27", "L-30", "LW", "lw", "1W",
             "15W", "28W", "29W", "30W", "31W", "5-9", "*/10", "20/3"]  # fmt: skip
DOW_ITEMS = ["0", "5", "7", "mon", "1-5", "5-7", "5L", "FRIL", "0L", "7L", "MON#2", "1#1",
             "5#5", "0#5", "sat#4", "3#3", "*/7", "*/6", "*/2"]  # fmt: skip
DOM_FIELD = st.one_of(
    st.sampled_from(["*", "?"]),
    st.lists(st.sampled_from(DOM_ITEMS), min_size=1, max_size=3).map(",".join),
)
DOW_FIELD = st.one_of(
    st.sampled_from(["*", "?"]),
    st.lists(st.sampled_from(DOW_ITEMS), min_size=1, max_size=3).map(",".join),
)
MONTHS = st.sampled_from([set(range(1, 13)), {2}, {2, 4}, {4, 6, 9, 11}, {1, 7, 12}])


@settings(max_examples=300, deadline=None)
@given(DOM_FIELD, MONTHS, DOW_FIELD, st.dates(date(1990, 1, 1), date(2090, 1, 1)))
def test_days_match_brute_force(dom: str, months: set[int], dow: str, start: date) -> None:
    expr = f"0 0 {dom} {','.join(map(str, sorted(months)))} {dow}"
    ok = _day_predicate(dom, months, dow)
    anchor = int(datetime(start.year, start.month, start.day, tzinfo=UTC).timestamp() * 1000)
    # Refused ("never fires", or not within 5 years) iff no day in the next 5 years matches.
    horizon = [start + timedelta(days=i) for i in range(1, 5 * 366 + 1)]
    try:
        s = parse_schedule(expr, "UTC", anchor_ms=anchor)
    except InvalidSchedule as exc:
        assert "never fires" in str(exc)
        assert not any(ok(d) for d in horizon), expr
        return
    want = [d for d in horizon[:800] if ok(d)]
    got = [
        datetime.fromtimestamp(f / 1000, UTC).date()
        for f in s.fires(anchor, until_ms=anchor + 800 * DAY_MS)
    ]
    assert got == want, expr
    assert s.count_fires(anchor, anchor + 800 * DAY_MS) == len(want)


@settings(max_examples=60, deadline=None)
@given(
    st.sampled_from(["0 0 LW * *", "0 0 15W * *", "0 0 L-2 * *", "0 0 * * 5L", "0 0 * * 2#3"]),
    st.sampled_from(["America/New_York", "Europe/Berlin", "Pacific/Auckland"]),
    st.integers(_ms("2024-01-01T00:00:00Z"), _ms("2030-01-01T00:00:00Z")),
)
def test_next_fire_properties(expr: str, tz: str, after: int) -> None:
    s = parse_schedule(expr, tz, anchor_ms=after)
    fires = list(s.fires(after, limit=24))
    assert fires[0] > after and all(a < b for a, b in itertools.pairwise(fires))
    for a, b in itertools.pairwise(fires):
        assert s.next_fire(a) == b and s.next_fire(b - 1) == b
    # Midnight local is never in a gap in these zones: each fire is on a distinct local day.
    z = ZoneInfo(tz)
    assert len({datetime.fromtimestamp(f / 1000, z).date() for f in fires}) == len(fires)


# -- refusals ------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("expr", "needle"),
    [
        ("0 0 LW-2 * *", "day-of-month 'LW-2' is not supported: W takes one day"),
        ("0 0 1-5W * *", "day-of-month '1-5W' is not supported: W takes one day"),
        ("0 0 */2W * *", "day-of-month '*/2W' is not supported: W takes one day"),
        ("0 0 W * *", "day-of-month 'W' is not supported: W takes one day"),
        ("0 0 15W/2 * *", "day-of-month '15W/2' is not supported: W takes one day"),
        ("0 0 WL * *", "day-of-month 'WL' is not supported: W takes one day"),
        ("0 0 0W * *", "day-of-month value 0 out of range 1-31 in '0W'"),
        ("0 0 32W * *", "day-of-month value 32 out of range 1-31 in '32W'"),
        ("0 0 1-L * *", "day-of-month '1-L' is not supported: L takes an optional offset"),
        ("0 0 L/2 * *", "day-of-month 'L/2' is not supported: L takes an optional offset"),
        ("0 0 L-3/2 * *", "day-of-month 'L-3/2' is not supported: L takes an optional"),
        ("0 0 L-31 * *", "day-of-month 'L-31' is not supported: L takes an optional offset"),
        ("0 0 L+1 * *", "day-of-month 'L+1' is not supported"),
        ("0 0 L- * *", "day-of-month 'L-' is not supported"),
        ("0 0 5L * *", "day-of-month '5L' is not supported: nL (the last such weekday"),
        ("0 0 1#2 * *", "day-of-month '1#2' is not supported: # belongs in day-of-week"),
        ("0 0 ?,1 * *", "day-of-month '?,1' is not supported: ? stands alone"),
        ("0 0 ?/2 * *", "day-of-month '?/2' is not supported: ? stands alone"),
        ("0 0 * * ?,1", "day-of-week '?,1' is not supported: ? stands alone"),
        ("0 0 * * L", "day-of-week 'L' is not supported: L alone is ambiguous"),
        ("0 0 * * L5", "day-of-week 'L5' is not supported: write the weekday first"),
        ("0 0 * * 1-5L", "day-of-week '1-5L' is not supported: in day-of-week, L follows one"),
        ("0 0 * * */2L", "day-of-week '*/2L' is not supported: in day-of-week, L follows"),
        ("0 0 * * 1#0", "day-of-week '1#0' is not supported: # takes one weekday and an"),
        ("0 0 * * 1#6", "day-of-week '1#6' is not supported: # takes one weekday"),
        ("0 0 * * 1#", "day-of-week '1#' is not supported: # takes one weekday"),
        ("0 0 * * #2", "day-of-week '#2' is not supported: # takes one weekday"),
        ("0 0 * * MON-FRI#2", "day-of-week 'MON-FRI#2' is not supported: # takes one"),
        ("0 0 * * 1#2/2", "day-of-week '1#2/2' is not supported: # takes one weekday"),
        ("0 0 * * 1#2#3", "day-of-week '1#2#3' is not supported"),
        ("0 0 * * 5L#2", "day-of-week '5L#2' is not supported"),
        ("0 0 * * 8L", "day-of-week value 8 out of range 0-7 in '8L'"),
        ("0 0 * * 8#1", "day-of-week value 8 out of range 0-7 in '8#1'"),
        ("0 0 * * 5W", "day-of-week '5W' is not supported: W belongs in day-of-month"),
        ("0 0 * * XYZL", "day-of-week 'XYZL' is not supported: in day-of-week, L follows"),
        ("0 0 * * XYZ#1", "day-of-week 'XYZ#1' is not supported: # takes one weekday"),
        ("L 0 * * *", "minute 'L' is not supported: L, W, # and ? are only allowed"),
        ("0 ? * * *", "hour '?' is not supported: L, W, # and ? are only allowed"),
        ("0 0 * L *", "month 'L' is not supported"),
        ("0 0 * 1#2 *", "month '1#2' is not supported"),
        ("0 0 L * * *", "hour 'L' is not supported"),
        ("0 0 L-30 2 *", "'0 0 L-30 2 *' never fires: day-of-month L-30 does not occur in"),
        ("0 0 31W 4,6 *", "never fires: day-of-month 31W does not occur in month 4,6"),
        ("0 0 30W,L-29 feb *", "never fires: day-of-month 30W,L-29 does not occur in month 2"),
        ("0 0 30 2 ?", "never fires: day-of-month 30 does not occur in month 2"),
        # AND rule (a field starts with *): combinations no calendar ever has.
        ("0 0 LW * */7", "never fires: no day in month * is both day-of-month LW and day-of-w"),
        ("0 0 15W,1W * */6", "no day in month * is both day-of-month 15W,1W and day-of-week"),
        ("0 0 */31 * 5L", "no day in month * is both day-of-month */31 and day-of-week 5L"),
        ("0 0 */31 feb 0#5", "no day in month feb is both day-of-month */31 and day-of-week"),
        ("0 0 ² * *", "day-of-month field: '²' is not a number or a known name"),
    ],
)
def test_refusals_name_the_problem(expr: str, needle: str) -> None:
    t = time.perf_counter()
    with pytest.raises(InvalidSchedule) as ei:
        parse_schedule(expr)
    assert time.perf_counter() - t < 0.05  # decided from the calendar, not by a long search
    assert ei.value.field == "schedule.expr"
    assert needle in str(ei.value)


@pytest.mark.parametrize(
    "expr",
    ["0 0 L 2 *", "0 0 L-28 2 *", "0 0 29W 2 *", "0 0 LW 2 *", "0 0 31 2 5L", "0 0 L * ?",
     "0 0 ? * MON#2", "0 0 ? * ?", "0 0 1,15,L * *", "0 0 L,LW,L-1,1W * *"],
)  # fmt: skip
def test_accepted(expr: str) -> None:
    assert parse_schedule(expr, anchor_ms=_ms("2026-01-01T00:00:00Z")).next_fire(0) is not None

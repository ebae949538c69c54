"""Schedules in words (what the dashboard shows): the common shapes read as a person says
them, with their zone; anything else is shown as written, never guessed."""

from __future__ import annotations

from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from schedd.schedule import describe_schedule, parse_schedule


@pytest.mark.parametrize(
    ("expr", "tz", "words"),
    [
        ("0 9 * * 1-5", "Europe/Berlin", "at 09:00 on weekdays, Europe/Berlin"),
        ("30 2 * * *", "Europe/Berlin", "at 02:30 every day, Europe/Berlin"),
        ("*/5 * * * * *", "", "every 5 seconds, UTC"),
        ("*/15 * * * *", "UTC", "every 15 minutes, UTC"),
        ("0 */2 * * *", "UTC", "every 2 hours at :00, UTC"),
        ("15 * * * *", "UTC", "every hour at :15, UTC"),
        ("0 9 * * mon,wed,fri", "UTC", "at 09:00 on Mon, Wed, Fri, UTC"),
        ("0 9 * * 1-3", "UTC", "at 09:00 on Mon to Wed, UTC"),
        ("0 30 8 * * 6,0", "Asia/Tokyo", "at 08:30 on weekends, Asia/Tokyo"),
        ("0 0 1 * *", "UTC", "at 00:00 on day 1 of the month, UTC"),
        ("@daily", "UTC", "every day at 00:00, UTC"),
        ("@every 30s", "UTC", "every 30s"),
        ("@after 2s", "UTC", "once, 2s after it was created"),
        # not said in words: shown as written
        ("0 9 L * *", "UTC", "cron 0 9 L * *, UTC"),
        ("0 9 1 * 1", "UTC", "cron 0 9 1 * 1, UTC"),  # day 1 OR Mondays
        ("1-5 * * * *", "UTC", "cron 1-5 * * * *, UTC"),
    ],
)
def test_common_shapes_in_words(expr: str, tz: str, words: str) -> None:
    assert describe_schedule(expr, tz) == words


FIELD = st.sampled_from(["*", "0", "5", "*/2", "1-3", "1,4", "*/15", "30"])
DOW = st.sampled_from(["*", "1-5", "0,6", "mon", "2", "1-3", "sun"])


@settings(max_examples=300, deadline=None)
@given(minute=FIELD, hour=st.sampled_from(["*", "0", "9", "*/3", "23"]), dow=DOW)
def test_words_say_what_the_schedule_does(minute: str, hour: str, dow: str) -> None:
    """Whatever it says about the time of day holds for the schedule's next fires."""
    expr = f"{minute} {hour} * * {dow}"
    words = describe_schedule(expr, "Europe/Berlin")
    assert words.endswith(", Europe/Berlin") and words
    if not words.startswith("at "):
        return
    hh, mm = words.split()[1].split(":")[:2]
    schedule = parse_schedule(expr, "Europe/Berlin")
    cursor = int(datetime(2026, 1, 5, tzinfo=UTC).timestamp() * 1000)
    for _ in range(3):
        nxt = schedule.next_fire(cursor)
        assert nxt is not None
        local = datetime.fromtimestamp(nxt / 1000, ZoneInfo("Europe/Berlin"))
        assert (local.hour, local.minute) == (int(hh), int(mm)), (expr, words, local)
        if "weekdays" in words:
            assert local.weekday() < 5
        cursor = nxt

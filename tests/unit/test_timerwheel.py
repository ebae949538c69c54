"""Unit tests for TimerWheel: add, cancel, advance, overflow levels, past timers, ties."""

from __future__ import annotations

import pytest

import schedd.timerwheel as tw
from schedd.timerwheel import TimerHandle, TimerWheel


def drive(wheel: TimerWheel[str], until_ms: int) -> list[tuple[int, str]]:
    """Advance at each next_expiry_ms (like the driver) up to until_ms; (time, item) pairs."""
    out: list[tuple[int, str]] = []
    while (nxt := wheel.next_expiry_ms()) is not None and nxt <= until_ms:
        out.extend((max(nxt, wheel.now_ms), item) for item in wheel.advance(nxt))
    out.extend((until_ms, item) for item in wheel.advance(until_ms))
    return out


def test_public_api_is_pinned() -> None:
    assert sorted(tw.__all__) == ["TimerHandle", "TimerWheel", "WheelDriver"]


def test_rejects_bad_geometry() -> None:
    with pytest.raises(ValueError, match="tick_ms"):
        TimerWheel(tick_ms=0, start_ms=0)
    with pytest.raises(ValueError, match="wheel_size"):
        TimerWheel(wheel_size=1, start_ms=0)


def test_empty_wheel() -> None:
    w: TimerWheel[str] = TimerWheel(start_ms=1_000)
    assert len(w) == 0
    assert w.next_expiry_ms() is None
    assert w.advance(10_000) == []
    assert w.now_ms == 10_000


def test_fires_at_bucket_deadline_never_early() -> None:
    w: TimerWheel[str] = TimerWheel(tick_ms=10, start_ms=0)
    w.add(25, "a")
    assert w.next_expiry_ms() == 29  # last ms of the [20, 30) bucket
    assert w.advance(24) == []
    assert w.advance(25) == ["a"]  # advance inside the bucket fires what is due
    assert len(w) == 0
    assert w.next_expiry_ms() is None


def test_partial_bucket_keeps_later_timers() -> None:
    w: TimerWheel[str] = TimerWheel(tick_ms=10, start_ms=0)
    w.add(27, "late")
    w.add(22, "early")
    assert w.advance(23) == ["early"]
    assert w.next_expiry_ms() == 29
    assert w.advance(29) == ["late"]


def test_expiry_order_and_ties_in_insertion_order() -> None:
    w: TimerWheel[str] = TimerWheel(tick_ms=10, wheel_size=8, start_ms=0)
    w.add(500, "far-1")  # overflow wheel
    w.add(15, "b")
    w.add(12, "a")
    w.add(15, "c")
    w.advance(470)  # "far-1" has moved down by now; the next one goes straight to the bottom
    w.add(500, "far-2")
    assert w.advance(470) == []
    assert w.advance(10_000) == ["far-1", "far-2"]
    w2: TimerWheel[str] = TimerWheel(tick_ms=10, wheel_size=8, start_ms=0)
    for e, s in [(15, "b"), (12, "a"), (15, "c"), (3, "0")]:
        w2.add(e, s)
    assert w2.advance(20) == ["0", "a", "b", "c"]


def test_past_and_present_timers_fire_on_next_advance() -> None:
    w: TimerWheel[str] = TimerWheel(tick_ms=10, start_ms=1_000)
    w.add(1_000, "now")
    w.add(5, "long-ago")
    assert len(w) == 2
    assert w.next_expiry_ms() == 1_000
    assert w.advance(1_000) == ["long-ago", "now"]
    assert w.advance(999) == []  # time never goes back
    assert w.now_ms == 1_000


def test_cancel() -> None:
    w: TimerWheel[str] = TimerWheel(tick_ms=10, start_ms=0)
    h1 = w.add(100, "x")
    h2 = w.add(100, "y")
    assert h1.pending and h1.expire_ms == 100 and h1.item == "x"
    assert w.cancel(h1) is True
    assert w.cancel(h1) is False
    assert not h1.pending
    assert len(w) == 1
    assert w.advance(200) == ["y"]
    assert w.cancel(h2) is False  # already fired
    assert "done" in repr(h2)


def test_fully_cancelled_buckets_are_skipped_by_next_expiry() -> None:
    w: TimerWheel[str] = TimerWheel(tick_ms=10, start_ms=0)
    hs = [w.add(50 + i, "dead") for i in range(5)]
    w.add(5_000, "alive")
    for h in hs:
        w.cancel(h)
    assert w.next_expiry_ms() == 5_009  # the bottom bucket [5000, 5010)
    assert w.advance(6_000) == ["alive"]


def test_cancel_past_timer() -> None:
    w: TimerWheel[str] = TimerWheel(start_ms=100)
    h = w.add(50, "x")
    assert w.cancel(h)
    assert w.next_expiry_ms() is None
    assert w.advance(200) == []


def test_far_timers_across_several_overflow_levels() -> None:
    # wheel spans: 40 ms, 160 ms, 640 ms, 2560 ms, 10240 ms, ...
    w: TimerWheel[str] = TimerWheel(tick_ms=10, wheel_size=4, start_ms=0)
    expiries = [5, 39, 40, 159, 160, 610, 2_559, 2_560, 9_999, 123_456, 10**9]
    for e in expiries:
        w.add(e, str(e))
    fired = drive(w, 10**9 + 100)
    assert [int(item) for _, item in fired] == sorted(expiries)
    for t, item in fired:
        assert int(item) <= t <= int(item) + 9  # never early, under one tick late
    assert len(w) == 0


def test_worked_example_from_docstring() -> None:
    w: TimerWheel[str] = TimerWheel(tick_ms=10, wheel_size=4, start_ms=0)
    w.add(610, "x")
    assert w.next_expiry_ms() == 480
    assert w.advance(480) == []
    assert w.next_expiry_ms() == 600
    assert w.advance(600) == []
    assert w.next_expiry_ms() == 619
    assert w.advance(615) == ["x"]


def test_big_jump_fires_everything_in_order() -> None:
    w: TimerWheel[int] = TimerWheel(tick_ms=10, wheel_size=8, start_ms=0)
    expiries = [(i * 7919) % 100_000 for i in range(2_000)]
    for e in expiries:
        w.add(e, e)
    assert w.advance(100_000) == sorted(expiries)


def test_compaction_keeps_cancel_cheap_and_memory_bounded() -> None:
    w: TimerWheel[int] = TimerWheel(tick_ms=10, start_ms=0)
    hs = [w.add(55, i) for i in range(1_000)]
    for h in hs[:900]:
        w.cancel(h)
    bucket = hs[950]._bucket
    assert bucket is not None
    assert len(bucket.items) < 400  # dead handles were compacted away
    assert w.advance(60) == list(range(900, 1_000))


def test_handles_use_slots() -> None:
    w: TimerWheel[int] = TimerWheel(start_ms=0)
    h = w.add(1, 1)
    assert isinstance(h, TimerHandle)
    assert not hasattr(h, "__dict__")


def test_sequence_resets_when_empty() -> None:
    w: TimerWheel[str] = TimerWheel(start_ms=0)
    w.add(10, "a")
    w.advance(100)
    w.add(200, "b")
    w.add(200, "c")
    assert w.advance(300) == ["b", "c"]

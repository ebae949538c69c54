"""The pure rules of HTTP jobs: answers, Retry-After, refused targets, breaker and bulkhead
(a fake clock; hypothesis drives the breaker through arbitrary sequences)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from schedd.worker._http_policy import (
    RETRY_AFTER_CAP_MS,
    BreakerState,
    Bulkheads,
    CircuitBreakers,
    Verdict,
    blocked_reason,
    classify_status,
    host_allowed,
    parse_retry_after,
)


class FakeClock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


@pytest.mark.parametrize(
    ("status", "extra", "verdict"),
    [
        (200, (), Verdict.SUCCESS),
        (204, (), Verdict.SUCCESS),
        (299, (), Verdict.SUCCESS),
        (404, (404,), Verdict.SUCCESS),
        (500, (), Verdict.RETRY),
        (503, (), Verdict.RETRY),
        (599, (), Verdict.RETRY),
        (408, (), Verdict.RETRY),
        (429, (), Verdict.RETRY),
        (400, (), Verdict.PERMANENT),
        (401, (), Verdict.PERMANENT),
        (404, (), Verdict.PERMANENT),
        (410, (), Verdict.PERMANENT),
        (301, (), Verdict.PERMANENT),
        (100, (), Verdict.PERMANENT),
    ],
)
def test_classify_status(status: int, extra: tuple[int, ...], verdict: Verdict) -> None:
    assert classify_status(status, extra) is verdict


def test_retry_after_seconds_and_dates() -> None:
    now = datetime(2026, 12, 5, 12, 0, 0, tzinfo=UTC)
    now_ms = int(now.timestamp() * 1000)
    assert parse_retry_after(None, now_ms) == 0
    assert parse_retry_after("", now_ms) == 0
    assert parse_retry_after("7", now_ms) == 7000
    assert parse_retry_after(" 0 ", now_ms) == 0
    assert parse_retry_after("99999999", now_ms) == RETRY_AFTER_CAP_MS
    later = format_datetime(now + timedelta(seconds=30), usegmt=True)
    assert parse_retry_after(later, now_ms) == 30_000
    earlier = format_datetime(now - timedelta(seconds=30), usegmt=True)
    assert parse_retry_after(earlier, now_ms) == 0
    assert parse_retry_after("soon", now_ms) == 0
    assert parse_retry_after("-5", now_ms) == 0


@pytest.mark.parametrize(
    ("address", "refused"),
    [
        ("169.254.169.254", "metadata"),
        ("169.254.1.1", "link-local"),
        ("fe80::1", "link-local"),
        ("fe80::1%eth0", "link-local"),
        ("fd00:ec2::254", "metadata"),
        ("100.100.100.200", "metadata"),
        ("::ffff:169.254.169.254", "metadata"),
        ("0.0.0.0", "unspecified"),
        ("::", "unspecified"),
        ("224.0.0.1", "multicast"),
        ("127.0.0.1", ""),
        ("10.1.2.3", ""),
        ("93.184.215.14", ""),
        ("2001:db8::1", ""),
        ("example.com", ""),
    ],
)
def test_blocked_addresses(address: str, refused: str) -> None:
    why = blocked_reason(address)
    assert (refused in why) if refused else why == ""
    if refused:
        assert why


def test_host_allow_list() -> None:
    assert host_allowed("anything.example", [])
    allow = ["api.example.com", "*.hooks.example.org", "LOCALHOST."]
    assert host_allowed("api.example.com", allow)
    assert host_allowed("API.Example.com.", allow)
    assert host_allowed("localhost", allow)
    assert host_allowed("a.hooks.example.org", allow)
    assert host_allowed("a.b.hooks.example.org", allow)
    assert not host_allowed("hooks.example.org", allow)
    assert not host_allowed("evilhooks.example.org", allow)
    assert not host_allowed("api.example.com.evil.net", allow)
    assert not host_allowed("127.0.0.1", allow)
    assert host_allowed("::1", ["[::1]"])


def test_breaker_opens_after_consecutive_failures_and_lets_one_trial() -> None:
    clock = FakeClock()
    b = CircuitBreakers(3, 10.0, clock)
    for _ in range(2):
        assert b.allow("h:80")
        b.failure("h:80")
    assert b.allow("h:80")
    b.success("h:80")  # a success resets the count
    for _ in range(3):
        assert b.allow("h:80")
        b.failure("h:80")
    assert b.state("h:80") is BreakerState.OPEN
    assert not b.allow("h:80") and b.retry_in("h:80") == pytest.approx(10.0)
    assert b.allow("other:80")  # per host
    clock.t += 9.9
    assert not b.allow("h:80")
    clock.t += 0.1
    assert b.state("h:80") is BreakerState.HALF_OPEN
    assert b.allow("h:80")  # the trial
    assert not b.allow("h:80") and not b.allow("h:80")
    b.failure("h:80")  # the trial failed: open again, a full cool-down
    assert not b.allow("h:80")
    clock.t += 10
    assert b.allow("h:80")
    b.success("h:80")
    assert b.state("h:80") is BreakerState.CLOSED and b.allow("h:80") and b.allow("h:80")
    assert b.opened("h:80") == 2


def test_breaker_trial_abandoned_or_answered_permanently() -> None:
    clock = FakeClock()
    b = CircuitBreakers(1, 5.0, clock)
    b.failure("h:1")
    clock.t += 5
    assert b.allow("h:1")
    b.abandon("h:1")  # cancelled: another trial may go
    assert b.allow("h:1")
    b.neutral("h:1")  # a 404: the host answers, the circuit closes
    assert b.state("h:1") is BreakerState.CLOSED


def test_breaker_rejects_bad_settings() -> None:
    with pytest.raises(ValueError, match="failures"):
        CircuitBreakers(0, 1.0, FakeClock())
    with pytest.raises(ValueError, match="cool-down"):
        CircuitBreakers(1, 0.0, FakeClock())


_EVENT = st.sampled_from(["allow", "success", "failure", "neutral", "abandon", "tick"])


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(_EVENT, st.floats(0.0, 4.0)), max_size=80))
def test_breaker_properties(events: list[tuple[str, float]]) -> None:
    """Whatever happens: while open and cooling down nothing is allowed; half-open allows at
    most one request until that one is answered; closed allows everything."""
    clock = FakeClock()
    b = CircuitBreakers(3, 3.0, clock)
    out = 0  # allowed requests not yet answered
    for event, dt in events:
        if event == "tick":
            clock.t += dt
            continue
        if event == "allow":
            before = b.state("k")
            ok = b.allow("k")
            if before is BreakerState.CLOSED:
                assert ok
            if before is BreakerState.OPEN:  # still cooling down
                assert not ok
            if ok:
                out += 1
            continue
        if out == 0:  # answers only for requests that went
            continue
        out -= 1
        getattr(b, event)("k")
    # half-open: at most one trial out at once
    if b.state("k") is BreakerState.HALF_OPEN:
        first = b.allow("k")
        assert not (first and b.allow("k"))


def test_bulkhead_limits_per_host() -> None:
    bh = Bulkheads(2)
    assert bh.try_enter("a") and bh.try_enter("a")
    assert not bh.try_enter("a")
    assert bh.try_enter("b")
    bh.leave("a")
    assert bh.in_flight("a") == 1 and bh.try_enter("a")
    for _ in range(5):
        bh.leave("b")
    assert bh.in_flight("b") == 0
    with pytest.raises(ValueError):
        Bulkheads(0)


async def test_bulkhead_queue_hands_places_over_in_turn() -> None:
    bh = Bulkheads(1, max_wait_s=5.0)
    assert bh.try_enter("a")
    first = asyncio.ensure_future(bh.enter("a"))
    second = asyncio.ensure_future(bh.enter("a"))
    await asyncio.sleep(0)
    assert not bh.may_wait("a")  # one waits already: the limit of waiters is 1
    bh.leave("a")
    assert await first and not second.done()
    second.cancel()  # a waiter that gives up does not take the place with it
    with pytest.raises(asyncio.CancelledError):
        await second
    bh.leave("a")
    assert bh.in_flight("a") == 0 and bh.try_enter("a")


async def test_bulkhead_wait_times_out() -> None:
    bh = Bulkheads(1, max_wait_s=0.05)
    assert bh.try_enter("a")
    assert not await bh.enter("a")
    assert bh.may_wait("a") and bh.in_flight("a") == 1

"""Property tests: the wheel against a sorted-list model under random adds/cancels/advances."""

from __future__ import annotations

import bisect

from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from schedd.timerwheel import TimerHandle, TimerWheel

# Small wheels so a few hundred ms already exercise three or four overflow levels.
geometry = st.tuples(st.sampled_from([1, 3, 10]), st.sampled_from([2, 3, 4, 8]))
offsets = st.one_of(
    st.integers(-50, 100),
    st.integers(0, 2_000),
    st.integers(0, 1_000_000),
)


class WheelVsModel(RuleBasedStateMachine):
    """Model: a sorted list of (expire_ms, seq) for pending timers."""

    def __init__(self) -> None:
        super().__init__()
        self.model: list[tuple[int, int]] = []
        self.handles: dict[int, TimerHandle] = {}
        self.done: list[TimerHandle] = []
        self.seq = 0

    @initialize(geo=geometry, start=st.integers(-1_000, 10**6))
    def make(self, geo: tuple[int, int], start: int) -> None:
        self.tick, size = geo
        self.wheel: TimerWheel[int] = TimerWheel(tick_ms=self.tick, wheel_size=size, start_ms=start)

    @rule(offset=offsets)
    def add(self, offset: int) -> None:
        expire = self.wheel.now_ms + offset
        self.seq += 1
        self.handles[self.seq] = self.wheel.add(expire, self.seq)
        bisect.insort(self.model, (expire, self.seq))

    @precondition(lambda self: bool(self.model))
    @rule(pick=st.integers(0, 10**9))
    def cancel(self, pick: int) -> None:
        expire, seq = self.model.pop(pick % len(self.model))
        handle = self.handles.pop(seq)
        assert handle.expire_ms == expire
        assert self.wheel.cancel(handle)
        assert not self.wheel.cancel(handle)
        self.done.append(handle)

    @precondition(lambda self: bool(self.done))
    @rule(pick=st.integers(0, 10**9))
    def cancel_done(self, pick: int) -> None:
        assert not self.wheel.cancel(self.done[pick % len(self.done)])

    def _advance_to(self, now: int) -> list[int]:
        fired = self.wheel.advance(now)
        now = max(now, self.wheel.now_ms)
        cut = bisect.bisect_right(self.model, (now, 10**18))
        expected, self.model = self.model[:cut], self.model[cut:]
        assert fired == [seq for _, seq in expected]  # exact set, expiry then insertion order
        for seq in fired:
            self.done.append(self.handles.pop(seq))
        return fired

    @rule(step=st.one_of(st.integers(0, 30), st.integers(0, 5_000), st.integers(0, 10**6)))
    def advance_arbitrary(self, step: int) -> None:
        self._advance_to(self.wheel.now_ms + step)

    @rule(times=st.integers(1, 20))
    def advance_like_driver(self, times: int) -> None:
        """Advancing to each next_expiry_ms: every timer fires within one tick, never early."""
        for _ in range(times):
            nxt = self.wheel.next_expiry_ms()
            if nxt is None:
                return
            at = max(nxt, self.wheel.now_ms)
            was_now = self.wheel.now_ms
            expiries = {seq: e for e, seq in self.model}
            for seq in self._advance_to(at):
                e = expiries[seq]
                assert e <= at
                # lateness is measured from when it could first fire (added overdue or not)
                assert at - max(e, was_now) < self.tick

    @invariant()
    def counts_agree(self) -> None:
        if not hasattr(self, "wheel"):
            return
        assert len(self.wheel) == len(self.model)
        nxt = self.wheel.next_expiry_ms()
        if not self.model:
            assert nxt is None
        else:
            assert nxt is not None
            # the next deadline is never later than the earliest timer's bottom-bucket end
            earliest = self.model[0][0]
            assert nxt <= max(earliest // self.tick * self.tick + self.tick - 1, self.wheel.now_ms)


WheelVsModel.TestCase.settings = settings(max_examples=300, stateful_step_count=60, deadline=None)
TestWheelVsModel = WheelVsModel.TestCase


@settings(max_examples=200, deadline=None)
@given(
    geo=geometry,
    expiries=st.lists(st.integers(0, 200_000), max_size=200),
    cancel_mask=st.lists(st.booleans(), max_size=200),
)
def test_driver_cadence_never_early_at_most_one_tick_late(
    geo: tuple[int, int], expiries: list[int], cancel_mask: list[bool]
) -> None:
    tick, size = geo
    wheel: TimerWheel[int] = TimerWheel(tick_ms=tick, wheel_size=size, start_ms=0)
    handles = [wheel.add(e, i) for i, e in enumerate(expiries)]
    cancelled = {i for i, c in zip(range(len(handles)), cancel_mask, strict=False) if c}
    for i in cancelled:
        wheel.cancel(handles[i])
    fired: list[tuple[int, int]] = []
    while (nxt := wheel.next_expiry_ms()) is not None:
        fired.extend((nxt, i) for i in wheel.advance(nxt))
    assert sorted(i for _, i in fired) == sorted(set(range(len(expiries))) - cancelled)
    for at, i in fired:
        assert expiries[i] <= at < expiries[i] + tick
    order = [(expiries[i], i) for _, i in fired]
    assert order == sorted(order)

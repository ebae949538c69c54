"""TenantLimiter: pacing (GCRA), running caps with an in-order wait, shares, sweeps."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from schedd.node._tenants import SWEEP_INTERVAL_MS, TenantLimiter
from schedd.v1.scheduler_pb2 import TenantLimits


def limiter(**tenants: TenantLimits) -> TenantLimiter[str]:
    lim: TenantLimiter[str] = TenantLimiter()
    lim.set_limits(tenants)
    return lim


def test_unlimited_tenant_goes_at_its_due_time() -> None:
    lim = limiter(a=TenantLimits(tenant="a", rate=1, burst=1))
    assert lim.admit("b", "b@1", 5_000, 1_000, "x") == 5_000
    assert lim.counts("b") == (0, 0)


def test_worked_example_rate_two_burst_two() -> None:
    lim = limiter(a=TenantLimits(tenant="a", rate=2, burst=2))
    slots = [lim.admit("a", f"a@{i}", 0, 0, "x") for i in range(5)]
    assert slots == [0, 0, 500, 1000, 1500]


def test_late_fires_are_paced_from_now_not_from_their_due_time() -> None:
    # A catch-up of 100 fires due an hour ago must not all go at once.
    lim = limiter(a=TenantLimits(tenant="a", rate=10, burst=1))
    now = 3_600_000
    slots = [lim.admit("a", f"a@{i}", i, now, "x") for i in range(100)]
    assert slots[0] == now
    assert slots[-1] == now + 99 * 100


def test_share_scales_rate_and_burst() -> None:
    lim = limiter(a=TenantLimits(tenant="a", rate=100, burst=10))
    lim.share = lambda: 0.5  # this node owns half the partitions: 50/s, burst 5
    slots = [lim.admit("a", f"a@{i}", 0, 0, "x") for i in range(7)]
    assert slots == [0, 0, 0, 0, 0, 20, 40]


def test_running_cap_queues_in_order_and_release_admits_the_next() -> None:
    lim = limiter(a=TenantLimits(tenant="a", max_running=2))
    assert lim.admit("a", "a@1", 10, 0, "one") == 10
    assert lim.admit("a", "a@2", 10, 0, "two") == 10
    assert lim.admit("a", "a@3", 10, 0, "three") is None
    assert lim.admit("a", "a@4", 10, 0, "four") is None
    assert lim.counts("a") == (2, 2)
    assert lim.drain(20) == []  # nothing ended yet
    assert lim.release("a@2") is True
    out = lim.drain(50)
    assert [(o.item, o.slot_ms) for o in out] == [("three", 50)]
    assert lim.counts("a") == (2, 1)
    # A release of something never counted changes nothing.
    assert lim.release("zzz@1") is False


def test_a_new_fire_waits_behind_those_already_waiting() -> None:
    lim = limiter(a=TenantLimits(tenant="a", max_running=1))
    lim.admit("a", "a@1", 0, 0, "one")
    assert lim.admit("a", "a@2", 0, 0, "two") is None
    lim.release("a@1")
    # a@3 arrives before the drain: it must not pass a@2.
    assert lim.admit("a", "a@3", 0, 0, "three") is None
    assert [o.item for o in lim.drain(1)] == ["two"]


def test_cap_share_rounds_down_but_keeps_one() -> None:
    lim = limiter(a=TenantLimits(tenant="a", max_running=5))
    lim.share = lambda: 6 / 16  # 1.875 -> 1
    assert lim.admit("a", "a@1", 0, 0, "x") == 0
    assert lim.admit("a", "a@2", 0, 0, "y") is None


def test_waiters_that_left_are_skipped_and_leaked_counts_are_swept() -> None:
    lim = limiter(a=TenantLimits(tenant="a", max_running=1))
    live = {"a@1", "a@2", "a@3"}
    lim.is_live = lambda eid: eid in live
    lim.admit("a", "a@1", 0, 0, "one")
    assert lim.admit("a", "a@2", 0, 0, "two") is None
    assert lim.admit("a", "a@3", 0, 0, "three") is None
    live.discard("a@2")  # cancelled while waiting
    lim.release("a@1")
    assert [o.item for o in lim.drain(5)] == ["three"]
    # a@3 leaves without a release: the next admission past the sweep interval finds out.
    live.discard("a@3")
    live.add("a@4")
    assert lim.admit("a", "a@4", 0, 10, "four") is None  # within the interval: still counted
    lim2 = limiter(a=TenantLimits(tenant="a", max_running=1))
    lim2.is_live = lambda eid: eid != "gone@1"
    lim2.admit("a", "gone@1", 0, 0, "gone")
    assert lim2.admit("a", "b@1", 0, SWEEP_INTERVAL_MS + 1, "next") == 0


def test_running_counts_executions_handed_out_without_admission() -> None:
    lim = limiter(a=TenantLimits(tenant="a", max_running=1))
    lim.running("a", "a@1")  # e.g. found on a worker after a takeover
    assert lim.admit("a", "a@2", 0, 0, "x") is None
    lim.release("a@1")
    assert [o.item for o in lim.drain(0)] == ["x"]


def test_lifting_limits_releases_the_waiting_in_order() -> None:
    lim = limiter(a=TenantLimits(tenant="a", max_running=1))
    lim.admit("a", "a@1", 0, 0, "one")
    lim.admit("a", "a@2", 7, 0, "two")
    lim.admit("a", "a@3", 8, 0, "three")
    out = lim.set_limits({})
    assert [(o.item, o.slot_ms) for o in out] == [("two", 7), ("three", 8)]
    assert not lim
    assert lim.admit("a", "a@4", 9, 0, "four") == 9


def test_raising_the_cap_lets_waiting_fires_go_at_the_next_drain() -> None:
    lim = limiter(a=TenantLimits(tenant="a", max_running=1))
    lim.admit("a", "a@1", 0, 0, "one")
    lim.admit("a", "a@2", 0, 0, "two")
    assert lim.set_limits({"a": TenantLimits(tenant="a", max_running=3)}) == []
    assert [o.item for o in lim.drain(1)] == ["two"]


@settings(max_examples=200, deadline=None)
@given(
    rate=st.floats(min_value=0.5, max_value=5_000),
    burst=st.integers(min_value=1, max_value=500),
    dues=st.lists(st.integers(min_value=0, max_value=20_000), min_size=1, max_size=300),
    window=st.integers(min_value=1, max_value=5_000),
)
def test_paced_slots_never_exceed_burst_plus_rate_in_any_window(
    rate: float, burst: int, dues: list[int], window: int
) -> None:
    lim = limiter(a=TenantLimits(tenant="a", rate=rate, burst=burst))
    dues.sort()
    slots = [lim.admit("a", f"a@{i}", d, 0, "x") for i, d in enumerate(dues)]
    assert all(s >= d for s, d in zip(slots, dues, strict=True))
    assert slots == sorted(slots)  # in the order they arrived
    # Any window of `window` ms holds at most burst + rate * window / 1000 slots (+1 for the
    # rounding of slots up to whole milliseconds).
    j = 0
    for i in range(len(slots)):
        while slots[i] - slots[j] >= window:
            j += 1
        assert i - j + 1 <= burst + rate * window / 1000 + 1

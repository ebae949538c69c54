"""The overload benchmark's pure parts: its window as a cron expression, recovery, CPU cost."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from schedd.schedule import parse_schedule

# On the path only while importing: scripts/bench/cluster.py would otherwise shadow the tests'
# namespace package cluster/ for every test file collected later.
_BENCH = str(Path(__file__).resolve().parents[2] / "scripts" / "bench")
sys.path.insert(0, _BENCH)
try:
    from _e2e_cluster import cpu_cost
    from _e2e_overload import _recovered_from, window_cron, window_start
finally:
    sys.path.remove(_BENCH)

EPOCH_2026 = 1_767_225_600  # 2026-01-01T00:00:00Z


@given(st.integers(EPOCH_2026, EPOCH_2026 + 365 * 86400), st.integers(1, 30))
def test_the_window_fires_each_second_of_its_length_once(earliest: int, length: int) -> None:
    start = window_start(earliest + 0.3, length)
    assert start >= earliest + 0.3
    assert start - earliest < 61
    sched = parse_schedule(window_cron(start, length), "UTC")
    fires = []
    at = (start - 5) * 1000
    for _ in range(length + 1):
        at = sched.next_fire(at)
        fires.append(at // 1000)
    assert fires[:length] == list(range(start, start + length))
    assert fires[length] > start + 300 * 86400  # next year's, not another second today


def test_the_window_waits_for_a_minute_it_fits_in() -> None:
    assert window_start(EPOCH_2026 + 25, 30) == EPOCH_2026 + 25
    assert window_start(EPOCH_2026 + 31, 30) == EPOCH_2026 + 60
    assert window_start(EPOCH_2026 + 30, 30) == EPOCH_2026 + 30


def test_recovery_is_the_first_second_of_a_lasting_normal_run() -> None:
    end = 100
    late = {s: 5000.0 for s in range(end, end + 8)}
    late.update({s: 20.0 for s in range(end + 8, end + 30)})
    late[end + 3] = 50.0  # a normal second inside the backlog does not count
    assert _recovered_from(late, end, 100.0) == end + 8


def test_recovery_needs_ten_observed_normal_seconds() -> None:
    late = {s: 20.0 for s in range(100, 108)}
    assert _recovered_from(late, 100, 100.0) is None
    assert _recovered_from({}, 100, 100.0) is None


def test_cpu_cost_per_fire_and_cores() -> None:
    c0 = {"node": 1.0, "worker": 2.0, "etcd": 3.0, "_wall": 10.0, "_epoch_ns": 0.0}
    c1 = {"node": 2.0, "worker": 2.5, "etcd": 3.5, "_wall": 12.0, "_epoch_ns": 2e9}
    out = cpu_cost(c0, c1, 10_000)
    assert out["node_cpu_us_per_fire"] == pytest.approx(100.0)
    assert out["worker_cpu_us_per_fire"] == pytest.approx(50.0)
    assert out["total_cpu_us_per_fire"] == pytest.approx(200.0)
    assert out["node_cores"] == pytest.approx(0.5)

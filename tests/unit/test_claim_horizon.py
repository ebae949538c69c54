"""The claim lead stretches ahead of bursts so their claims are durable by the fire (pure)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from schedd._clock import ManualClock
from schedd.node._config import NodeConfig
from schedd.node._partition import PartitionRunner
from schedd.store import DueEntry


def runner(now: int) -> PartitionRunner:
    store: Any = SimpleNamespace(partition=0)
    cfg = NodeConfig(node_id="t", data_dir=Path("/nonexistent"))
    r = PartitionRunner(store, cfg, ManualClock(now), history=None, outcomes=None)  # type: ignore[arg-type]
    r.window_end = now + cfg.window_ms
    return r


def add(r: PartitionRunner, due_ms: int, n: int) -> None:
    for i in range(n):
        r.due[(due_ms, f"j{i:06d}")] = DueEntry(0, due_ms, f"j{i:06d}", "f", due_ms, 1)


def test_trickle_uses_the_plain_lead_and_slice() -> None:
    r = runner(1_000_000)
    add(r, 1_000_000 + 10_000, 100)
    assert r.claim_horizon(1_000_000) == 1_000_000 + r.config.lead_ms + r.config.claim_slice_ms


def test_burst_is_claimed_early_enough_at_the_measured_rate() -> None:
    now = 1_000_000
    r = runner(now)
    r.claim_rate = 4000.0  # measured; the configured node rate is set to match below
    due = now + 20_000
    r.config = replace(r.config, claim_rate=4000.0)
    add(r, due, 40_000)  # 40k at 4000/s (x0.7) needs ~14.3 s: start claiming before due - 14.3 s
    plain = now + r.config.lead_ms + r.config.claim_slice_ms
    assert r.claim_horizon(now) == plain  # 20 s away: not yet
    start = due - r.config.lead_ms - 14_000
    assert r.claim_horizon(start) >= due, "a burst this size must be claimed from now on"
    later_rate = runner(now)
    later_rate.claim_rate = 40_000.0
    later_rate.config = replace(later_rate.config, claim_rate=40_000.0)
    add(later_rate, due, 40_000)
    assert later_rate.claim_horizon(start) < due, "a fast etcd needs no early start"


def test_partitions_share_the_node_rate() -> None:
    now = 1_000_000
    r = runner(now)
    r.claim_rate = 1e9  # measured alone; the node's rate is what 16 partitions share
    r.partitions_owned = 16
    due = now + 30_000
    add(r, due, 6_000)  # 3000/s over 16 partitions (x0.7): ~45 s for this share
    assert r.claim_horizon(now) >= due


def test_a_mid_sized_burst_is_looked_at_early_enough_to_start_its_claims() -> None:
    """The claim loop must not sleep until the plain lead when the horizon would start sooner.

    625 entries per partition (10k over 16) at the node's shared rate take ~4.8 s to claim: the
    loop has to be awake several seconds before due - lead, not asleep until then.
    """
    now = 1_000_000
    due = now + 12_000
    r = runner(now)
    r.claim_rate = 1e9
    r.partitions_owned = 16
    add(r, due, 625)
    t = now
    while r.claim_horizon(t) < due:  # the sleeping loop's view: wake, look, sleep again
        wait = r.next_claim_wait_ms(t)
        assert wait > 0
        t += wait
    assert t <= due - r.config.lead_ms - 4_000, "claims must start about 4.8 s ahead"
    needed_ms = 625 / (3000.0 / 16 * 0.7 / 1000.0)
    assert t <= due - needed_ms + 250


def test_a_trickle_sleeps_until_its_lead() -> None:
    now = 1_000_000
    r = runner(now)
    add(r, now + 10_000, 3)
    assert r.next_claim_wait_ms(now) == 10_000 - r.config.lead_ms

"""The claim lead stretches ahead of bursts so their claims are durable by the fire (pure)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from schedd.node._config import NodeConfig
from schedd.node._pacing import ClaimPacer
from schedd.node._window import DueWindow
from schedd.store import FIRE, DueEntry


def runner(now: int) -> Any:
    """A partition's pacer and window, the window loaded up to ``now + W``."""
    cfg = NodeConfig(node_id="t", data_dir=Path("/nonexistent"))
    window = DueWindow()
    window.end = now + cfg.window_ms
    return SimpleNamespace(pacer=ClaimPacer(cfg), window=window)


def add(r: Any, due_ms: int, n: int) -> None:
    r.window.extend(
        [DueEntry(0, due_ms, f"j{i:06d}", FIRE, due_ms, 1) for i in range(n)], r.window.end
    )


def test_trickle_uses_the_plain_lead_and_slice() -> None:
    r = runner(1_000_000)
    add(r, 1_000_000 + 10_000, 100)
    assert (
        r.pacer.horizon(r.window, 1_000_000)
        == 1_000_000 + r.pacer.config.lead_ms + r.pacer.config.claim_slice_ms
    )


def test_burst_is_claimed_early_enough_at_the_measured_rate() -> None:
    now = 1_000_000
    r = runner(now)
    r.pacer.claim_rate = 4000.0  # measured; the configured node rate is set to match below
    due = now + 20_000
    r.pacer.config = replace(r.pacer.config, claim_rate=4000.0)
    add(r, due, 40_000)  # 40k at 4000/s (x0.7) needs ~14.3 s: start claiming before due - 14.3 s
    plain = now + r.pacer.config.lead_ms + r.pacer.config.claim_slice_ms
    assert r.pacer.horizon(r.window, now) == plain  # 20 s away: not yet
    start = due - r.pacer.config.lead_ms - 14_000
    assert r.pacer.horizon(r.window, start) >= due, "a burst this size must be claimed from now on"
    later_rate = runner(now)
    later_rate.pacer.claim_rate = 40_000.0
    later_rate.pacer.config = replace(later_rate.pacer.config, claim_rate=40_000.0)
    add(later_rate, due, 40_000)
    assert later_rate.pacer.horizon(later_rate.window, start) < due, (
        "a fast etcd needs no early start"
    )


def test_partitions_share_the_node_rate() -> None:
    now = 1_000_000
    r = runner(now)
    r.pacer.claim_rate = 1e9  # measured alone; the node's rate is what 16 partitions share
    r.pacer.partitions_owned = 16
    due = now + 30_000
    add(r, due, 6_000)  # 3000/s over 16 partitions (x0.7): ~45 s for this share
    assert r.pacer.horizon(r.window, now) >= due


def test_a_mid_sized_burst_is_looked_at_early_enough_to_start_its_claims() -> None:
    """The claim loop must not sleep until the plain lead when the horizon would start sooner.

    625 entries per partition (10k over 16) at the node's shared rate take ~4.8 s to claim: the
    loop has to be awake several seconds before due - lead, not asleep until then.
    """
    now = 1_000_000
    due = now + 12_000
    r = runner(now)
    r.pacer.claim_rate = 1e9
    r.pacer.partitions_owned = 16
    add(r, due, 625)
    t = now
    while r.pacer.horizon(r.window, t) < due:  # the sleeping loop's view: wake, look, sleep again
        wait = r.pacer.idle_wait_ms(r.window, t)
        assert wait > 0
        t += wait
    assert t <= due - r.pacer.config.lead_ms - 4_000, "claims must start about 4.8 s ahead"
    needed_ms = 625 / (3000.0 / 16 * 0.7 / 1000.0)
    assert t <= due - needed_ms + 250


def test_a_trickle_sleeps_until_its_lead() -> None:
    now = 1_000_000
    r = runner(now)
    add(r, now + 10_000, 3)
    assert r.pacer.idle_wait_ms(r.window, now) == 10_000 - r.pacer.config.lead_ms

"""How far ahead a partition claims, and how long its claim loop may sleep (pure).

Claims are made L (``lead_ms``) ahead of the fire, a slice (``claim_slice_ms``) at a time. A
burst (100k fires due at :00) takes longer than L to claim at the rate etcd sustains, so the
horizon stretches ahead of it: claims start early enough to be durable by the fire.
"""

from __future__ import annotations

from schedd.node._config import NodeConfig
from schedd.node._window import DueWindow


class ClaimPacer:
    """The claim pace of one partition: its measured claim rate and its share of the node's."""

    def __init__(self, config: NodeConfig) -> None:
        self.config = config
        #: Measured claims per second (EWMA), for stretching the lead ahead of bursts.
        self.claim_rate = config.claim_rate
        #: How many partitions this node owns (set by the node): they share its claim rate.
        self.partitions_owned = 1

    def observe(self, claimed: int, elapsed_s: float) -> None:
        """A claim round of ``claimed`` entries took ``elapsed_s`` (small rounds say little)."""
        if claimed >= 64 and elapsed_s > 0:
            self.claim_rate = 0.7 * self.claim_rate + 0.3 * (claimed / elapsed_s)

    def planned_rate_per_ms(self) -> float:
        """Claims per ms to plan with: this partition's share of the node's rate, or what it
        measured if that is lower, with a 30% margin."""
        share = self.config.claim_rate / max(1, self.partitions_owned)
        return max(min(self.claim_rate, share), 50.0) * 0.7 / 1000.0

    def horizon(self, window: DueWindow, now: int) -> int:
        """How far ahead to claim now: L plus one claim slice, stretched ahead of bursts.

        A round is started when the earliest entry is L ahead and takes a slice beyond it, so
        entries spread thin are claimed in batches. That suffices for a steady trickle. For a
        burst, the horizon extends to every point h whose backlog (entries due up to h, at
        the planned rate) needs more time than the slack before h.
        """
        horizon = now + self.config.lead_ms + self.config.claim_slice_ms
        rate_per_ms = self.planned_rate_per_ms()
        for seconds in range(1, self.config.window_ms // 1000 + 1):
            h = horizon + seconds * 1000
            if h > window.end:
                break
            backlog = window.count_until(h)
            if backlog / rate_per_ms > seconds * 1000:
                horizon = h
        return horizon

    def idle_wait_ms(self, window: DueWindow, now: int) -> int:
        """How long the claim loop may sleep when a round found nothing to claim.

        Until the window needs extending or the earliest entry reaches its lead; but once the
        entries of the window would take about as long to claim (at the planned rate) as the
        time left before that lead, :meth:`horizon` may start them early at any moment, so
        from then on the loop looks again every 250 ms.
        """
        wait_ms = window.end - self.config.window_ms // 2 - now
        first_due = window.first_due_ms()
        if first_due is not None:
            wait_ms = min(wait_ms, first_due - self.config.lead_ms - now)
            # Sleep until claiming them all would take within a second of what is left, then
            # poll (new entries wake the loop anyway, so this is redone when the count grows).
            claim_ms = len(window) / self.planned_rate_per_ms()
            if claim_ms > self.config.claim_slice_ms:  # more than a trickle
                wait_ms = min(wait_ms, max(250, int(wait_ms - claim_ms - 1000)))
        return wait_ms

"""The credit pool the worker's streams share: dispatch slots and prefetch slots."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from schedd.worker._connection import NodeConnection


class CreditPool:
    """Slots for ``capacity`` concurrent executions, granted out to live streams.

    Invariant: free + (credits granted and unused, over all streams) + (executions holding a
    slot) == capacity. A freed slot goes to the live stream with the fewest outstanding
    (unused + running), so a node that joins later gets its share as work finishes.

    With ``hold=True`` the pool counts prefetch credits instead: slots for executions sent
    ahead of their instant (a stream's ``hold_unused`` and ``held``, granted as
    ``prefetch_credits``).
    """

    def __init__(self, capacity: int, *, hold: bool = False) -> None:
        self.capacity = capacity
        self.free = capacity
        self.accepting = True
        self.hold = hold
        self._conns: list[NodeConnection] = []
        self._held = 0

    def attach(self, conn: NodeConnection) -> None:
        self._conns.append(conn)
        self.distribute()

    def detach(self, conn: NodeConnection) -> None:
        if conn in self._conns:
            self._conns.remove(conn)
        if self.hold:
            self.free += conn.hold_unused
            conn.hold_unused = 0
            conn.revoking_hold = False
        else:
            self.free += conn.unused
            conn.unused = 0
            conn.revoking = False
        self.distribute()

    def returned(self, conn: NodeConnection, n: int) -> None:
        """The node answered this pool's revoke: ``n`` unused credits came back."""
        if self.hold:
            conn.hold_unused -= n
            conn.revoking_hold = False
        else:
            conn.unused -= n
            conn.revoking = False
        self.free += n
        self.distribute()

    def release(self, n: int = 1) -> None:
        """Executions (or unused dispatch credits) gave their slots back."""
        self.free += n
        if not self._held:
            self.distribute()

    @contextlib.contextmanager
    def holding(self) -> Iterator[None]:
        """Collect the slots released inside the block and grant them once, at its end (a
        NodeBatch of executions that finish at once gives one credit grant, not one each)."""
        self._held += 1
        try:
            yield
        finally:
            self._held -= 1
            if not self._held:
                self.distribute()

    def _outstanding(self, conn: NodeConnection) -> int:
        return conn.hold_unused + conn.held if self.hold else conn.unused + conn.running

    def _grant(self, conn: NodeConnection, n: int) -> None:
        # The node may be waiting for these only when the stream's unused credits run low
        # (below a quarter of the slots): otherwise they may linger with the results.
        soon = self._unused(conn) < max(1, self.capacity // 4)
        if self.hold:
            conn.grant_hold(n, soon=soon)
        else:
            conn.grant(n, soon=soon)

    def distribute(self) -> None:
        if not (self.accepting and self._conns):
            return
        if self.free > 0:
            if len(self._conns) == 1:
                self._grant(self._conns[0], self.free)
                self.free = 0
                return
            while self.free > 0:
                conn = min(self._conns, key=self._outstanding)
                self._grant(conn, 1)
                self.free -= 1
        self._rebalance()

    def _rebalance(self) -> None:
        """A live stream has no credit and less than its share of the slots, and none is
        free: ask the streams holding more unused credits than their share for the excess.

        Granted credits are the node's to use, so they come back only through a revoke the
        node answers. Without this, a node that joins (or comes back) while its peers sit on
        every credit unused (their work all held ahead) would never get one: its fires would
        wait in its queue while this worker idles.
        """
        conns = self._conns
        if self.free > 0 or len(conns) < 2:
            return
        share = max(1, self.capacity // len(conns))
        unused = self._unused
        if not any(unused(c) == 0 and self._outstanding(c) < share for c in conns):
            return
        for c in conns:
            excess = unused(c) - share
            if excess > 0 and not (c.revoking_hold if self.hold else c.revoking):
                c.revoke(excess, hold=self.hold)

    def _unused(self, conn: NodeConnection) -> int:
        return conn.hold_unused if self.hold else conn.unused

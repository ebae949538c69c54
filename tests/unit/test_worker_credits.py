"""The worker's credit pool: a stream that joins late gets its share back by revoke."""

from __future__ import annotations

from typing import Any, cast

from schedd.worker._credits import CreditPool


class FakeConn:
    """The slice of NodeConnection the pool uses; revokes are answered by the test."""

    def __init__(self) -> None:
        self.live = True
        self.unused = self.running = self.hold_unused = self.held = 0
        self.revoking = self.revoking_hold = False
        self.revokes: list[tuple[int, bool]] = []

    def grant(self, n: int, *, soon: bool = True) -> None:
        self.unused += n

    def grant_hold(self, n: int, *, soon: bool = True) -> None:
        self.hold_unused += n

    def revoke(self, n: int, *, hold: bool) -> None:
        self.revokes.append((n, hold))
        if hold:
            self.revoking_hold = True
        else:
            self.revoking = True


def attach(pool: CreditPool, conn: FakeConn) -> None:
    pool.attach(cast(Any, conn))


def test_single_stream_gets_every_slot() -> None:
    pool, a = CreditPool(8), FakeConn()
    attach(pool, a)
    assert (a.unused, pool.free, a.revokes) == (8, 0, [])


def test_late_stream_revokes_the_excess_and_gets_it() -> None:
    pool, a, b = CreditPool(8), FakeConn(), FakeConn()
    attach(pool, a)
    attach(pool, b)  # nothing free: a holds all 8 unused, b has none
    assert b.unused == 0
    assert a.revokes == [(4, False)]  # share is 8 // 2
    # a second distribute while the revoke is outstanding asks nothing more
    pool.distribute()
    assert a.revokes == [(4, False)]
    # the node gave back 3 (it had used one meanwhile)
    a.unused -= 1
    a.running += 1
    pool.returned(cast(Any, a), 3)
    assert (a.unused, a.revoking, b.unused, pool.free) == (4, False, 3, 0)
    total = a.unused + a.running + b.unused + b.running + pool.free
    assert total == 8


def test_node_that_returns_nothing_leaves_the_counts_whole() -> None:
    pool, a, b = CreditPool(4), FakeConn(), FakeConn()
    attach(pool, a)
    attach(pool, b)
    a.unused, a.running = 0, 4  # all used before the revoke arrived
    pool.returned(cast(Any, a), 0)
    assert (a.revoking, b.unused, pool.free) == (False, 0, 0)
    pool.release(2)  # two executions on a finish: b is the stream with fewer outstanding
    assert b.unused == 2


def test_no_revoke_when_the_late_stream_already_has_its_share() -> None:
    pool, a, b = CreditPool(4), FakeConn(), FakeConn()
    attach(pool, a)
    b.running = 2  # e.g. results of executions it owns still running
    attach(pool, b)
    assert a.revokes == []


def test_detach_takes_back_the_unused_and_answers_outstanding_revokes() -> None:
    pool, a, b = CreditPool(6), FakeConn(), FakeConn()
    attach(pool, a)
    attach(pool, b)
    assert a.revoking
    pool.detach(cast(Any, a))  # stream ended: its unused come back without an answer
    assert (a.unused, a.revoking, b.unused, pool.free) == (0, False, 6, 0)


def test_hold_pool_revokes_prefetch_credits() -> None:
    pool, a, b = CreditPool(10, hold=True), FakeConn(), FakeConn()
    attach(pool, a)
    attach(pool, b)
    assert a.revokes == [(5, True)] and a.revoking_hold and not a.revoking
    pool.returned(cast(Any, a), 5)
    assert (a.hold_unused, b.hold_unused) == (5, 5)

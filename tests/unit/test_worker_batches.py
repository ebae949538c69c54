"""The worker's outgoing batches: sealed at an item count and at a byte count, sent in order,
and flushed soon for what the node may wait for, later for results."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from schedd.v1 import worker_pb2
from schedd.worker._connection import NodeConnection
from schedd.worker._credits import CreditPool
from schedd.worker._outbox import FLUSH_S, LINGER_S, MAX_ITEMS, MAX_RESULT_BYTES


def _conn() -> NodeConnection:
    conn = NodeConnection(SimpleNamespace(), "node:1")  # type: ignore[arg-type]
    conn.live = True
    return conn


def _drain(conn: NodeConnection) -> list[worker_pb2.WorkerMessage]:
    out = []
    while (msg := conn.outbox.take()) is not None:
        out.append(msg)
    return out


async def test_a_burst_of_results_leaves_in_batches_of_at_most_max_items_in_order() -> None:
    conn = _conn()
    n = 2 * MAX_ITEMS + 10
    for i in range(n):
        r = conn.new_result()
        r.execution_id = f"e{i}"
    msgs = _drain(conn)
    sizes = [len(m.batch.results) for m in msgs]
    assert sizes == [MAX_ITEMS, MAX_ITEMS, 10]
    ids = [r.execution_id for m in msgs for r in m.batch.results]
    assert ids == [f"e{i}" for i in range(n)]  # filled in after sealing, still in place


async def test_large_outputs_seal_a_batch_before_it_passes_the_byte_cap() -> None:
    conn = _conn()
    big = b"x" * (1 << 20)
    for i in range(7):
        r = conn.new_result()
        r.execution_id = f"b{i}"
        r.output = big
        conn.result_bytes(len(big))
    msgs = _drain(conn)
    assert all(m.ByteSize() < MAX_RESULT_BYTES + len(big) + 4096 for m in msgs)
    assert [len(m.batch.results) for m in msgs] == [3, 3, 1]


async def test_credits_and_started_ride_along_and_a_result_drops_its_started() -> None:
    conn = _conn()
    conn.grant(5)
    conn.grant_hold(7)
    conn.add_started("s1", 3, 100)
    conn.add_started("s2", 4, 101)
    r = conn.new_result()
    r.execution_id = "s1"
    (msg,) = _drain(conn)
    assert (msg.batch.credits, msg.batch.prefetch_credits) == (5, 7)
    assert [s.execution_id for s in msg.batch.started] == ["s2"]


def _wait_s(conn: NodeConnection) -> float:
    """How long from now until the armed flush wakes the writer."""
    timer = conn.outbox._timer
    assert timer is not None
    return timer.when() - asyncio.get_running_loop().time()


async def test_results_linger_and_what_the_node_may_wait_for_goes_soon() -> None:
    conn = _conn()
    conn.new_result().execution_id = "r1"
    conn.add_heartbeat("r0", 3, None)
    conn.add_started("r2", 3, 100)
    assert FLUSH_S < _wait_s(conn) <= LINGER_S  # nothing here is waited for
    conn.add_not_here("p1")  # a probe's answer: the node's redelivery waits on it
    assert _wait_s(conn) <= FLUSH_S
    conn.new_result().execution_id = "r3"  # a later result does not push it back
    assert _wait_s(conn) <= FLUSH_S
    (msg,) = _drain(conn)
    assert conn.outbox._timer is None
    assert [r.execution_id for r in msg.batch.results] == ["r1", "r3"]
    # Credits: soon when the stream's unused ones run low, lingering when it has plenty.
    conn.unused = 0
    conn.grant(1, soon=False)
    assert FLUSH_S < _wait_s(conn) <= LINGER_S
    conn.grant(1)
    assert _wait_s(conn) <= FLUSH_S


async def test_the_pool_grants_soon_only_to_a_stream_running_low() -> None:
    pool = CreditPool(8)
    conn = _conn()
    pool.attach(conn)  # all 8 granted: it had none, so they go soon
    assert conn.unused == 8 and _wait_s(conn) <= FLUSH_S
    _drain(conn)
    conn.unused -= 1  # one dispatch used a credit and its execution ended
    pool.release()
    assert conn.unused == 8 and FLUSH_S < _wait_s(conn) <= LINGER_S
    _drain(conn)
    conn.unused -= 7  # a burst used nearly all: the node may be waiting for the next
    pool.release(7)
    assert _wait_s(conn) <= FLUSH_S

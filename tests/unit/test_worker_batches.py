"""The worker's outgoing batches: sealed at an item count and at a byte count, sent in order."""

from __future__ import annotations

from types import SimpleNamespace

from schedd.v1 import worker_pb2
from schedd.worker._connection import NodeConnection
from schedd.worker._outbox import MAX_ITEMS, MAX_RESULT_BYTES


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

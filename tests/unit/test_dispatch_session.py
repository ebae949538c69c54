"""WorkerSession's outgoing side: batches become ready, and coalesce while the writer is busy."""

from __future__ import annotations

import asyncio

from schedd.dispatch._config import DispatchStats
from schedd.dispatch._session import WorkerSession
from schedd.v1 import worker_pb2


def _session(
    max_batch: int = 4, flush_ms: int = 1000, max_bytes: int = 8 << 20, capacity: int = 1000
) -> WorkerSession:
    s = WorkerSession(
        1,
        worker_pb2.Hello(worker_id="w", queues=["q"], handlers=["h"], capacity=capacity),
        connected_ms=0,
        max_batch=max_batch,
        flush_interval_ms=flush_ms,
        stats=DispatchStats(),
        max_message_bytes=max_bytes,
    )
    s.credits = 1000
    return s


def _d(i: int, payload: bytes = b"") -> worker_pb2.Dispatch:
    return worker_pb2.Dispatch(
        execution_id=f"j{i}/1", fencing_token=10 + i, queue="q", handler="h", payload=payload
    )


def _ids(msg: worker_pb2.NodeMessage | None) -> list[str]:
    assert msg is not None
    return [d.execution_id for d in msg.batch.dispatches]


async def test_nothing_is_ready_until_full_or_flushed() -> None:
    s = _session(max_batch=4)
    for i in range(3):
        s.send_dispatch(_d(i))
    assert s.take() is None
    s.send_dispatch(_d(3))  # the fourth fills the batch
    assert _ids(s.take()) == ["j0/1", "j1/1", "j2/1", "j3/1"]
    assert s.take() is None
    s.send_dispatch(_d(4))
    s.flush()
    assert _ids(s.take()) == ["j4/1"]
    assert s.credits == 995 and len(s.in_flight) == 5


async def test_items_join_the_ready_batch_while_the_writer_is_busy() -> None:
    s = _session(max_batch=4)
    for i in range(10):  # two and a half batches' worth before the writer comes back
        s.send_dispatch(_d(i))
    s.send_acks([
        worker_pb2.ResultAck(execution_id="ok/1", fencing_token=3, accepted=True),
        worker_pb2.ResultAck(execution_id="old/1", fencing_token=3, code=9, message="stale"),
    ])  # fmt: skip
    msg = s.take()
    assert _ids(msg) == [f"j{i}/1" for i in range(10)]
    # Only the refusal goes: the worker acts on no other answer.
    assert msg is not None and [a.execution_id for a in msg.batch.acks] == ["old/1"]
    assert s.take() is None
    assert s._stats.node_messages_sent == 1 and s._stats.dispatches_sent == 10
    assert (s._stats.acks_sent, s._stats.results_answered) == (1, 2)


async def test_the_flush_interval_makes_a_partial_batch_ready() -> None:
    s = _session(max_batch=100, flush_ms=5)
    s.send_cancel("j1/1", 11, "stop")
    assert s.take() is None
    msg = await asyncio.wait_for(s.next_message(), 1.0)
    assert msg is not None and [c.execution_id for c in msg.batch.cancels] == ["j1/1"]


async def test_the_waiting_writer_is_woken_and_gets_end_after_the_last_batch() -> None:
    s = _session(max_batch=2)
    writer = asyncio.ensure_future(s.next_message())
    await asyncio.sleep(0)
    assert not writer.done()
    s.send_dispatch(_d(0))
    s.send_dispatch(_d(1))
    assert _ids(await asyncio.wait_for(writer, 1.0)) == ["j0/1", "j1/1"]
    s.send_dispatch(_d(2))
    s.end()  # flushes what is buffered first
    assert _ids(await s.next_message()) == ["j2/1"]
    assert await s.next_message() is None
    s.send_dispatch(_d(3))  # after the end nothing more is sent
    assert await s.next_message() is None


async def test_large_payloads_are_sealed_into_messages_under_the_byte_cap() -> None:
    s = _session(max_batch=100, max_bytes=20_000)
    for i in range(5):
        s.send_dispatch(_d(i, payload=b"x" * 8000))
    s.flush()
    sizes = []
    while (msg := s.take()) is not None:
        sizes.append(len(msg.batch.dispatches))
        assert msg.ByteSize() < 20_000 + 1000
    assert sizes == [2, 2, 1]


async def test_coalescing_stops_at_half_the_workers_capacity() -> None:
    s = _session(max_batch=2, capacity=16)
    for i in range(13):
        s.send_dispatch(_d(i))
    s.flush()
    sizes = []
    while (msg := s.take()) is not None:
        sizes.append(len(msg.batch.dispatches))
    assert sizes == [8, 5]  # capacity 16 -> at most 8 (4 x max_batch) per message

"""The per-queue counts of one node (``queue_loads``) and their cluster-wide merge
(``merge_queues``): pure, no node, no sleeps."""

from __future__ import annotations

from schedd.dispatch import InFlight, QueueLoad, queue_loads
from schedd.node._queues import hide_free_slots, merge_queues
from schedd.v1 import peer_pb2, scheduler_pb2, worker_pb2


def _d(eid: str, queue: str = "q", tenant: str = "t", start_at_ms: int = 0) -> worker_pb2.Dispatch:
    return worker_pb2.Dispatch(
        execution_id=eid, queue=queue, tenant=tenant, start_at_ms=start_at_ms
    )


def _flight(d: worker_pb2.Dispatch, started: bool = False) -> InFlight:
    return InFlight(d, "w1", 0, 10_000, started=started)


def test_pending_is_due_held_until_started_and_the_rest_running() -> None:
    pending = [_d("a"), _d("b", queue="r")]
    flights = [
        _flight(_d("c", start_at_ms=5_000)),  # sent ahead, not started: held
        _flight(_d("d", start_at_ms=5_000), started=True),  # started at its instant
        _flight(_d("e")),  # dispatched, its Started not heard yet
        _flight(_d("f", tenant="other")),
    ]
    assert queue_loads(pending, flights) == {
        "q": QueueLoad(due=1, held=1, running=3),
        "r": QueueLoad(due=1),
    }
    assert queue_loads(pending, flights, tenant="other") == {"q": QueueLoad(running=1)}
    assert QueueLoad(due=2, held=3, running=9).depth == 5


def _worker(
    wid: str, node: str, queues: list[str], capacity: int, in_flight: int, held: int = 0
) -> scheduler_pb2.WorkerStatus:
    return scheduler_pb2.WorkerStatus(
        worker_id=wid, node_id=node, queues=queues, capacity=capacity, in_flight=in_flight,
        held=held,
    )  # fmt: skip


def test_parts_add_up_and_a_worker_on_every_node_counts_once() -> None:
    n1 = peer_pb2.LocalQueues(
        queues=[scheduler_pb2.QueueStatus(queue="mail", due=3, running=1)],
        workers=[_worker("w1", "n1", ["mail", "web"], 4, 1)],
    )
    n2 = peer_pb2.LocalQueues(
        queues=[scheduler_pb2.QueueStatus(queue="mail", held=1, running=1)],
        workers=[
            _worker("w1", "n2", ["mail", "web"], 4, 2, held=1),
            _worker("w2", "n2", ["web"], 2, 2),
        ],
    )
    rows = {r.queue: r for r in merge_queues([n1, n2])}
    assert list(rows) == ["mail", "web"]
    mail, web = rows["mail"], rows["web"]
    assert (mail.due, mail.held, mail.running) == (3, 1, 2)
    # w1 runs 1 + (2 - 1 held) = 2 of 4; w2 runs 2 of 2.
    assert (mail.workers, mail.capacity, mail.free_slots) == (1, 4, 2)
    assert (web.workers, web.capacity, web.free_slots) == (2, 6, 2)
    assert (web.due, web.held, web.running) == (0, 0, 0)


def test_one_queue_is_listed_even_when_nothing_is_known_of_it() -> None:
    n1 = peer_pb2.LocalQueues(
        queues=[scheduler_pb2.QueueStatus(queue="mail", due=3)],
        workers=[_worker("w1", "n1", ["mail"], 4, 0)],
    )
    (row,) = merge_queues([n1], "empty")
    assert row.queue == "empty" and row.HasField("free_slots") and row.free_slots == 0
    assert merge_queues([], "") == []
    (mail,) = merge_queues([n1], "mail")
    hide_free_slots([mail])
    assert not mail.HasField("free_slots") and mail.capacity == 4

"""``ListQueues``: the nodes' per-queue parts merged into one cluster-wide row per queue.

Each node reports its dispatcher's counts (due, held, running: every execution is counted
by the one node that dispatches it, so the counts add up) and its worker streams. A worker
has a stream to every node, so workers are merged by id first (:func:`merge_workers`: its
in-flight and held executions summed over its streams) and then counted once per queue
they consume.

Worked example: node n1 has 3 due on ``mail``, node n2 1 held; worker w1 (capacity 4, queues
``mail`` and ``web``) runs 1 from n1 and 1 from n2. The rows are ``mail``: due 3, held 1,
running 0, workers 1, capacity 4, free slots 2; ``web``: workers 1, capacity 4, free 2.
"""

from __future__ import annotations

from collections.abc import Iterable

from schedd.node._views import merge_workers
from schedd.v1 import peer_pb2, scheduler_pb2


def merge_queues(
    parts: Iterable[peer_pb2.LocalQueues], queue: str = ""
) -> list[scheduler_pb2.QueueStatus]:
    """One row per queue (only ``queue``, when given: listed even when empty), sorted by name.

    ``free_slots`` is a worker's capacity less what runs on it (in flight and not held, over
    all its streams), summed over the queue's workers; a worker serving several queues counts
    in each.
    """
    rows: dict[str, scheduler_pb2.QueueStatus] = {}

    def row(name: str) -> scheduler_pb2.QueueStatus:
        found = rows.get(name)
        if found is None:
            found = rows[name] = scheduler_pb2.QueueStatus(queue=name, free_slots=0)
        return found

    streams = []
    for part in parts:
        for q in part.queues:
            if queue and q.queue != queue:
                continue
            r = row(q.queue)
            r.due += q.due
            r.held += q.held
            r.running += q.running
        streams.append(part.workers)
    for w in merge_workers(streams):
        free = max(0, w.capacity - max(0, w.in_flight - w.held))
        for name in set(w.queues):
            if queue and name != queue:
                continue
            r = row(name)
            r.workers += 1
            r.capacity += w.capacity
            r.free_slots += free
    if queue:
        row(queue)
    return [rows[name] for name in sorted(rows)]


def hide_free_slots(rows: Iterable[scheduler_pb2.QueueStatus]) -> None:
    """Clears ``free_slots`` (for a tenant's token: free slots are the workers' capacity less
    every tenant's running executions, so they would show the others' load)."""
    for r in rows:
        r.ClearField("free_slots")


__all__ = ["hide_free_slots", "merge_queues"]

"""How much work each queue has on this node: due, held and running executions.

Pure counting over the dispatcher's pending dispatches and in-flight table, for the node's
per-queue gauges and its part of ``ListQueues``. An execution is in exactly one of the three
on the node that dispatches it (the owner of its partition), so the nodes' counts add up.

Worked example: pending ``a`` (queue q), in flight ``b`` (q, sent with a ``start_at_ms``, not
started) and ``c`` (q, started) give ``{"q": QueueLoad(due=1, held=1, running=1)}``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from schedd.dispatch._config import InFlight
from schedd.v1 import worker_pb2


@dataclass
class QueueLoad:
    """One queue's executions on this node.

    Attributes:
        due: Due and waiting for a worker with a free slot (pending dispatch).
        held: Sent ahead of their instant to a worker that holds them, not started.
        running: Out on a worker and not held: started, or on their way to a worker.
    """

    due: int = 0
    held: int = 0
    running: int = 0

    @property
    def depth(self) -> int:
        """What waits to start: due plus held (what an autoscaler scales on)."""
        return self.due + self.held


def is_held(flight: InFlight) -> bool:
    """Whether an in-flight execution was sent ahead of its instant and has not started: on
    its worker, waiting for the instant or, after it, for a free slot."""
    return bool(flight.dispatch.start_at_ms) and not flight.started


def queue_loads(
    pending: Iterable[worker_pb2.Dispatch],
    flights: Iterable[InFlight],
    tenant: str | None = None,
) -> dict[str, QueueLoad]:
    """Per queue: due (``pending``), held and running (``flights``); with ``tenant``, only
    that tenant's executions. Queues with none are absent."""
    out: dict[str, QueueLoad] = {}
    for d in pending:
        if tenant is None or d.tenant == tenant:
            load = out.get(d.queue)
            if load is None:
                load = out[d.queue] = QueueLoad()
            load.due += 1
    for f in flights:
        d = f.dispatch
        if tenant is not None and d.tenant != tenant:
            continue
        load = out.get(d.queue)
        if load is None:
            load = out[d.queue] = QueueLoad()
        if is_held(f):
            load.held += 1
        else:
            load.running += 1
    return out

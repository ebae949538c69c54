"""The metrics recorder contract and its no-op default."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Protocol

#: What a gauge's ``read`` callback returns at each read: one number for a gauge without
#: labels, or the current samples by label values (a tuple, one value per label name, in the
#: order of ``labels``) for one with labels. A label set missing from the mapping has no
#: sample at that read (a queue that emptied disappears, it does not read 0).
GaugeValue = float | Mapping[tuple[str, ...], float]


class MetricsRecorder(Protocol):
    """The events schedd reports, one method each.

    Contract for implementations: called on the reporter's event loop (never from handler
    threads); cheap (no I/O, no locks held across awaits: aggregate and export elsewhere);
    never raises. Durations are seconds, lateness milliseconds.
    """

    def fire_lateness(self, ms: float) -> None:
        """Node: a timer fired ``ms`` after its scheduled instant (negative: early)."""

    def fired(self, delays_ms: Sequence[float], held: int = 0) -> None:
        """Node: it handed executions to workers: at once, each ``delay`` ms after the instant
        it was meant to start, and ``held`` more ahead of their instants (a worker starts
        those on its own timer)."""

    def throttled(self, n: int) -> None:
        """Node: ``n`` fires were held back by their tenant's limits."""

    def lease_keepalive_failed(self) -> None:
        """Node: a keep-alive of its session lease failed."""

    def grpc_request(self, method: str, code: str, seconds: float) -> None:
        """Node: it answered one client API call (``method`` such as ``"CreateJob"``)."""

    def execution_started(self, lateness_ms: float) -> None:
        """Worker: a handler started ``lateness_ms`` after the instant its node meant."""

    def missed(self, reason: str) -> None:
        """Node: a fire was not run (``reason``: the misfire policy or deadline that dropped it)."""

    def dead_lettered(self) -> None:
        """Node: an execution ran out of attempts and went to the dead-letter queue."""

    def write_rejected(self, what: str) -> None:
        """Node: the store refused one item of a batch on its own as malformed (``what``:
        ``"result"``, ``"claim"``, ``"redelivery"``, ...); it is retried with backoff."""

    def partitions_owned(self, n: int) -> None:
        """Node: it now owns ``n`` partitions."""

    def ownership_changed(self) -> None:
        """Node: it gained or lost a partition."""

    def store_request(self, op: str, seconds: float, ok: bool) -> None:
        """Node: one store request (``op`` such as ``"claim"`` or ``"settle"``) took ``seconds``."""

    def worker_slots(self, free: int, in_flight: int) -> None:
        """Worker: ``free`` execution slots, ``in_flight`` executions started and not reported."""

    def execution_finished(self, outcome: int, seconds: float) -> None:
        """Worker: an attempt it ran ended with ``outcome`` (a ``schedd.v1.worker_pb2.Outcome``
        value) after ``seconds`` from its start (0 for one decided before it started).

        One call per attempt carries the handler's duration too, so the worker's hot path pays
        for one call, not two.
        """

    # -- read side: state sampled when the backend exports, and what the dashboard shows --------

    def gauge(
        self,
        name: str,
        doc: str,
        read: Callable[[], GaugeValue],
        labels: Sequence[str] = (),
    ) -> None:
        """Registers a gauge whose value is read by calling ``read`` when the backend exports
        (a Prometheus scrape), never on a hot path: what can be read (timers armed, slots
        free, executions pending per queue) costs nothing between exports.

        Args:
            name: The metric's full name, ``schedd_``-prefixed, in base units
                (``schedd_worker_slots_free``, ``schedd_claim_lead_seconds``).
            doc: One line saying what it measures (the exposition's HELP).
            read: Returns the current value: a number when ``labels`` is empty, else a mapping
                from label values to numbers (see :data:`GaugeValue`). Called on the
                reporter's event loop; it must be cheap. If it raises, that gauge is left out
                of that one export (logged at debug), the others are not.
            labels: The label names, bounded in cardinality (a queue, a tenant; never a job
                or execution id).

        Register each name once, at start (a node or worker registers its gauges when it
        starts). Example, a worker's slots and its in-flight executions per queue::

            recorder.gauge("schedd_worker_slots_free", "Slots free", lambda: pool.free)
            recorder.gauge(
                "schedd_worker_running",
                "Executions running, per queue",
                lambda: {(q,): float(n) for q, n in running_by_queue().items()},
                labels=("queue",),
            )
        """

    def histogram(self, name: str) -> list[tuple[float, int]]:
        """What a histogram this recorder keeps has counted since it was made, per bucket.

        Returns:
            ``(upper_bound, count)`` pairs in increasing bound order, one per bucket, the
            last bound ``math.inf``. The counts are per bucket, not cumulative (the
            observations ``v`` with ``previous bound < v <= upper_bound``), summed over all
            label sets. Bounds are in the histogram's unit (seconds for ``*_seconds``).
            Every bucket is listed, with 0 where nothing fell. ``[]`` when this recorder keeps
            no histogram of that name (another role's metric, an unknown name, or a backend
            that keeps nothing, such as :class:`NoopRecorder`).

        Example, after one fire handed out 3 ms late and one 40 ms late (bounds shortened)::

            recorder.histogram("schedd_fire_delay_seconds")
            # [(0.001, 0), (0.005, 1), (0.05, 1), (1.0, 0), (inf, 0)]

        Meant for views of the recorder's own process (the node's dashboard), not a hot path:
        it copies the buckets.
        """


class NoopRecorder:
    """Records nothing: the default recorder."""

    __slots__ = ()

    def fire_lateness(self, ms: float) -> None:
        pass

    def fired(self, delays_ms: Sequence[float], held: int = 0) -> None:
        pass

    def throttled(self, n: int) -> None:
        pass

    def lease_keepalive_failed(self) -> None:
        pass

    def grpc_request(self, method: str, code: str, seconds: float) -> None:
        pass

    def execution_started(self, lateness_ms: float) -> None:
        pass

    def missed(self, reason: str) -> None:
        pass

    def dead_lettered(self) -> None:
        pass

    def write_rejected(self, what: str) -> None:
        pass

    def partitions_owned(self, n: int) -> None:
        pass

    def ownership_changed(self) -> None:
        pass

    def store_request(self, op: str, seconds: float, ok: bool) -> None:
        pass

    def worker_slots(self, free: int, in_flight: int) -> None:
        pass

    def execution_finished(self, outcome: int, seconds: float) -> None:
        pass

    def gauge(
        self,
        name: str,
        doc: str,
        read: Callable[[], GaugeValue],
        labels: Sequence[str] = (),
    ) -> None:
        pass  # never read: nothing exports

    def histogram(self, name: str) -> list[tuple[float, int]]:
        return []

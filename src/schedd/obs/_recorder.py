"""The metrics recorder contract and its no-op default."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol


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

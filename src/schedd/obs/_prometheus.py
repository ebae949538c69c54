"""Prometheus metrics of a node or a worker: a :class:`MetricsRecorder` backend, gauges read at
scrape time, the gRPC interceptor that times client API calls, and the ``/metrics`` endpoint.

Every name starts with ``schedd_``; labels are bounded (an outcome, a reason category, an RPC
method, a queue or a limited tenant; never a job or execution id). docs/operations.md lists
each metric with its meaning; ``cluster/prometheus/`` has a scrape config and alert rules.

Events cost one counter increment or one histogram observation on the path that reports
them; what can be read (timers armed, executions pending, slots free, clock skew) is read
only when Prometheus scrapes, through :meth:`PrometheusRecorder.gauge`. The process's own
views (the node's dashboard) read a histogram through :meth:`PrometheusRecorder.histogram`
rather than parsing the exposition.
"""

from __future__ import annotations

import logging
import math
import time
from bisect import bisect_left
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import grpc
import grpc.aio
from aiohttp import web
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Gauge,
    ProcessCollector,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.utils import floatToGoString

from schedd import __version__
from schedd._limits import HTTP_MAX_REQUEST_BYTES
from schedd._tls import TlsFiles
from schedd._web import bound_address, serve
from schedd.obs._recorder import GaugeValue
from schedd.v1 import worker_pb2

if TYPE_CHECKING:
    from schedd.obs._recorder import MetricsRecorder

log = logging.getLogger(__name__)
# The ``*_created`` series (a timestamp per counter and histogram) say nothing an operator
# reads; they double the exposition.
disable_created_metrics()  # type: ignore[no-untyped-call]

#: Lateness and delay buckets (seconds): a millisecond to a minute.
LATENESS_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
#: Handler durations (seconds): 10 ms to an hour.
DURATION_BUCKETS = (0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 900, 3600)
#: Store and API request durations (seconds).
REQUEST_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 10)


def missed_category(reason: str) -> str:
    """The bounded label of a missed fire's free-text reason."""
    text = reason.lower()
    for word, label in (
        ("deadline", "deadline"),
        ("coalesc", "coalesce"),
        ("limit", "catch_up_limit"),
        ("skip", "skip"),
        ("paused", "paused"),
    ):
        if word in text:
            return label
    return "other"


class _Count:
    """One counter series."""

    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0.0

    def inc(self, n: float = 1) -> None:
        self.value += n


class _Hist:
    """One histogram series: per-bucket counts (``le`` inclusive) and the sum."""

    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)  # the last: above every bound (+Inf)
        self.sum = 0.0

    def observe(self, v: float) -> None:
        self.counts[bisect_left(self.bounds, v)] += 1
        self.sum += v


class _Family:
    """A counter or histogram family whose series live in plain Python objects.

    Recorder calls run on one event loop (the :class:`MetricsRecorder` contract), and so does
    the scrape (the aiohttp handler): no lock is needed, and an observation costs a bisect
    and two additions instead of prometheus_client's locked value objects, which matters on
    a worker starting 10k handlers in one burst.
    """

    def __init__(
        self,
        kind: str,
        name: str,
        doc: str,
        labels: Sequence[str] = (),
        bounds: tuple[float, ...] = (),
    ) -> None:
        self.kind, self.name, self.doc = kind, name, doc
        self.labelnames = tuple(labels)
        self.bounds = bounds
        self.series: dict[tuple[str, ...], Any] = {}
        self.only = self.labels() if not labels else None

    def labels(self, *values: str) -> Any:
        child = self.series.get(values)
        if child is None:
            child = self.series[values] = (
                _Hist(self.bounds) if self.kind == "histogram" else _Count()
            )
        return child

    def inc(self, n: float = 1) -> None:
        self.only.inc(n)  # type: ignore[union-attr]

    def observe(self, v: float) -> None:
        self.only.observe(v)  # type: ignore[union-attr]

    def buckets(self) -> list[tuple[float, int]]:
        """A histogram's per-bucket counts (not cumulative) summed over its series."""
        totals = [0] * (len(self.bounds) + 1)
        for h in self.series.values():
            for i, n in enumerate(h.counts):
                totals[i] += n
        return list(zip((*self.bounds, math.inf), totals, strict=True))

    def export(self) -> Metric:
        names = list(self.labelnames)
        if self.kind == "counter":
            fam: Metric = CounterMetricFamily(self.name, self.doc, labels=names)
            for key, c in self.series.items():
                fam.add_metric(list(key), c.value)  # type: ignore[attr-defined]
            return fam
        fam = HistogramMetricFamily(self.name, self.doc, labels=names)
        for key, h in self.series.items():
            running, buckets = 0, []
            for bound, n in zip((*self.bounds, math.inf), h.counts, strict=True):
                running += n
                buckets.append((floatToGoString(bound), running))  # type: ignore[no-untyped-call]
            fam.add_metric(list(key), buckets, h.sum)
        return fam


class _Null:
    """Stands in for a metric of the other role: every call does nothing."""

    def labels(self, *_: str) -> _Null:
        return self

    def inc(self, _: float = 1) -> None:
        pass

    def observe(self, _: float) -> None:
        pass


_NULL = _Null()


class _Collector:
    """Exports the recorder's families and the gauges read from callbacks at scrape time."""

    def __init__(self) -> None:
        self.families: list[_Family] = []
        self.gauges: list[tuple[str, str, tuple[str, ...], Callable[[], GaugeValue]]] = []

    def collect(self) -> Iterable[Metric]:
        for family in self.families:
            yield family.export()
        for name, doc, labels, read in self.gauges:
            try:
                value = read()
            except Exception:  # a scrape must not fail for one gauge
                log.debug("gauge %s could not be read", name, exc_info=True)
                continue
            gauge = GaugeMetricFamily(name, doc, labels=list(labels) if labels else None)
            if isinstance(value, Mapping):
                for key, v in value.items():
                    gauge.add_metric(list(key), v)
            else:
                gauge.add_metric([], value)
            yield gauge


class PrometheusRecorder:
    """Records a node's and/or a worker's events into its own registry (``roles``: "node",
    "worker", or both for ``schedd dev``)."""

    def __init__(self, roles: Sequence[str] = ("node",), *, process: bool = True) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        info = Gauge("schedd_build_info", "schedd version and role (value 1)",
                     ["version", "role"], registry=r)  # fmt: skip
        info.labels(__version__, "+".join(sorted(roles))).set(1)
        self._collector = _Collector()
        r.register(self._collector)
        if process:
            ProcessCollector(registry=r)
        self._owned_n = 0.0
        if "node" in roles:
            self.gauge(
                "schedd_partitions_owned", "Partitions this node owns", lambda: self._owned_n
            )
        self._node_families(self._builder("node" in roles))
        self._worker_families(self._builder("worker" in roles))
        self._outcomes: dict[int, str] = {
            int(code): name.removeprefix("OUTCOME_") for name, code in worker_pb2.Outcome.items()
        }

    def _builder(self, on: bool) -> Callable[..., Any]:
        """Makes the families of one role: exported when the recorder has that role, else
        stand-ins that record nothing (so the reporting methods need no role checks)."""
        families = self._collector.families

        def build(kind: str, name: str, doc: str, labels: Sequence[str] = (),
                  buckets: tuple[float, ...] = ()) -> Any:  # fmt: skip
            if not on:
                return _NULL
            family = _Family(kind, name, doc, labels, buckets)
            families.append(family)
            return family

        return build

    def _node_families(self, n: Callable[..., Any]) -> None:
        Counter, Histogram = "counter", "histogram"
        self._fires = n(Counter, "schedd_fires", "Executions the node handed to workers")
        self._fire_delay = n(
            Histogram, "schedd_fire_delay_seconds",
            "From the instant an execution was meant to start to the node handing it out",
            buckets=LATENESS_BUCKETS,
        )  # fmt: skip
        self._missed = n(Counter, "schedd_missed_fires", "Fires not run, by reason", ["reason"])
        self._dead = n(Counter, "schedd_dead_letters", "Executions moved to the dead letters")
        self._rejected = n(
            Counter,
            "schedd_store_rejected_writes",
            "Batch items the store refused on their own as malformed, by what they wrote",
            ["what"],
        )
        self._ownership = n(
            Counter, "schedd_ownership_changes", "Partitions this node gained or lost"
        )
        self._store = n(
            Histogram, "schedd_store_request_seconds", "etcd requests by operation", ["op"],
            buckets=REQUEST_BUCKETS,
        )  # fmt: skip
        self._store_errors = n(
            Counter, "schedd_store_errors", "etcd requests that failed, by operation", ["op"]
        )
        self._keepalive = n(
            Counter, "schedd_lease_keepalive_failures", "Session lease keep-alives that failed"
        )
        self._throttled = n(
            Counter, "schedd_tenant_throttled", "Fires held back by their tenant's limits"
        )
        self._grpc = n(
            Counter, "schedd_grpc_requests", "Client API calls answered", ["method", "code"]
        )
        self._grpc_seconds = n(
            Histogram, "schedd_grpc_request_seconds", "Client API call durations", ["method"],
            buckets=REQUEST_BUCKETS,
        )  # fmt: skip

    def _worker_families(self, w: Callable[..., Any]) -> None:
        Counter, Histogram = "counter", "histogram"
        self._lateness = w(
            Histogram, "schedd_start_lateness_seconds",
            "From the instant an execution was meant to start to its handler starting",
            buckets=LATENESS_BUCKETS,
        )  # fmt: skip
        self._finished = w(
            Counter, "schedd_executions_finished", "Attempts this worker ran, by outcome",
            ["outcome"],
        )  # fmt: skip
        self._duration = w(
            Histogram, "schedd_handler_duration_seconds", "Attempt durations on this worker",
            buckets=DURATION_BUCKETS,
        )  # fmt: skip

    # -- scrape-time gauges ----------------------------------------------------------------------

    def gauge(
        self, name: str, doc: str, read: Callable[[], GaugeValue], labels: Sequence[str] = ()
    ) -> None:
        """A gauge read by calling ``read`` at each scrape (a number, or by label values);
        see :meth:`schedd.obs.MetricsRecorder.gauge`."""
        self._collector.gauges.append((name, doc, tuple(labels), read))

    def histogram(self, name: str) -> list[tuple[float, int]]:
        """The per-bucket counts of the histogram ``name`` since this recorder was made,
        summed over its label sets; ``[]`` when it keeps no histogram of that name (see
        :meth:`schedd.obs.MetricsRecorder.histogram`)."""
        for family in self._collector.families:
            if family.kind == "histogram" and family.name == name:
                return family.buckets()
        return []

    # -- MetricsRecorder -------------------------------------------------------------------------

    def fire_lateness(self, ms: float) -> None:
        self._fire_delay.observe(ms / 1000.0)

    def fired(self, delays_ms: Sequence[float], held: int = 0) -> None:
        self._fires.inc(len(delays_ms) + held)
        observe = self._fire_delay.observe
        for ms in delays_ms:
            observe(ms / 1000.0)

    def throttled(self, n: int) -> None:
        self._throttled.inc(n)

    def missed(self, reason: str) -> None:
        self._missed.labels(missed_category(reason)).inc()

    def dead_lettered(self) -> None:
        self._dead.inc()

    def write_rejected(self, what: str) -> None:
        self._rejected.labels(what).inc()

    def partitions_owned(self, n: int) -> None:
        self._owned_n = float(n)

    def ownership_changed(self) -> None:
        self._ownership.inc()

    def store_request(self, op: str, seconds: float, ok: bool) -> None:
        self._store.labels(op).observe(seconds)
        if not ok:
            self._store_errors.labels(op).inc()

    def lease_keepalive_failed(self) -> None:
        self._keepalive.inc()

    def grpc_request(self, method: str, code: str, seconds: float) -> None:
        self._grpc.labels(method, code).inc()
        self._grpc_seconds.labels(method).observe(seconds)

    def worker_slots(self, free: int, in_flight: int) -> None:
        pass  # read at scrape time instead (the worker's gauges)

    def execution_started(self, lateness_ms: float) -> None:
        self._lateness.observe(lateness_ms / 1000.0)

    def execution_finished(self, outcome: int, seconds: float) -> None:
        self._finished.labels(self._outcomes.get(outcome, "UNKNOWN")).inc()
        if seconds > 0:
            self._duration.observe(seconds)

    # -- exposition ------------------------------------------------------------------------------

    def exposition(self) -> bytes:
        """The registry in Prometheus' text format."""
        return generate_latest(self.registry)


class MetricsInterceptor(grpc.aio.ServerInterceptor):
    """Times the node's unary calls (the client API and the peers' questions) into the
    recorder; streams (workers) pass untouched."""

    def __init__(self, record: Callable[[str, str, float], None]) -> None:
        self._record = record

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[Any]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> Any:
        handler = await continuation(handler_call_details)
        if handler is None or handler.unary_unary is None:
            return handler
        method = str(handler_call_details.method).rpartition("/")[2]
        inner = handler.unary_unary
        record = self._record

        async def timed(request: Any, context: Any) -> Any:
            t0 = time.perf_counter()
            failed = False
            try:
                return await inner(request, context)
            except BaseException:
                failed = True
                raise
            finally:
                code = context.code()
                name = code.name if isinstance(code, grpc.StatusCode) else None
                record(method, name or ("UNKNOWN" if failed else "OK"), time.perf_counter() - t0)

        return grpc.unary_unary_rpc_method_handler(
            timed,
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )


class MetricsServer:
    """Serves ``/metrics`` (and a one-line index at ``/``) on ``listen``: over HTTPS with the
    certificate of ``tls`` when it has one (no client certificate asked: Prometheus scrapes
    it with the CA only), else over HTTP."""

    def __init__(
        self, recorder: PrometheusRecorder, listen: str, *, tls: TlsFiles | None = None
    ) -> None:
        self.recorder = recorder
        self.listen = listen
        self.port = 0
        self.tls = tls if tls is not None and tls.has_certificate else None
        self._runner: web.AppRunner | None = None

    @property
    def address(self) -> str:
        return bound_address(self.listen, self.port)

    @property
    def url(self) -> str:
        return f"{'https' if self.tls else 'http'}://{self.address}/metrics"

    async def start(self) -> None:
        app = web.Application(client_max_size=HTTP_MAX_REQUEST_BYTES)
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/", self._index)
        context = self.tls.server_ssl_context() if self.tls is not None else None
        self._runner, self.port = await serve(app, self.listen, "metrics", context)
        log.info("metrics on %s", self.url)

    async def _metrics(self, request: web.Request) -> web.Response:
        body = self.recorder.exposition()
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def _index(self, request: web.Request) -> web.Response:
        return web.Response(text="schedd metrics: /metrics\n")

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None


def metrics_server(
    recorder: MetricsRecorder, listen: str, *, tls: TlsFiles | None = None
) -> MetricsServer | None:
    """The ``/metrics`` endpoint for ``recorder`` on ``listen`` (not started), or None when
    there is nothing to serve: ``listen`` is empty, or the recorder is not this backend's
    (another backend exports its own way, a :class:`~schedd.obs.NoopRecorder` has nothing).

    This is how a node or worker asks for an endpoint without knowing the backend::

        server = metrics_server(recorder, config.metrics_listen, tls=config.tls)
        if server is not None:
            await server.start()
    """
    if not listen or not isinstance(recorder, PrometheusRecorder):
        return None
    return MetricsServer(recorder, listen, tls=tls)

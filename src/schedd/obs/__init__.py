"""Observability seams: what nodes and workers report, behind one recorder protocol.

A recorder is given to a worker (``Worker(..., recorder=...)``) or a node and is called on
their hot paths, so every method must be cheap and must not raise. The default,
:class:`NoopRecorder`, does nothing; a Prometheus or OpenTelemetry backend is one new file
implementing :class:`MetricsRecorder`. Besides the events, a recorder takes gauges read when
it exports (:meth:`MetricsRecorder.gauge`, with :data:`GaugeValue` samples) and answers what
a histogram counted (:meth:`MetricsRecorder.histogram`) for the node's own views.
:class:`Health` is a node's gRPC health service.

The Prometheus backend (:class:`PrometheusRecorder`, the ``/metrics`` endpoint
:class:`MetricsServer`, :func:`metrics_server` that picks it for any recorder, and the gRPC
:class:`MetricsInterceptor`) can be imported from here
too (not in ``__all__``, the public face), and is loaded on first use: ``import schedd.obs``
stays cheap for code that needs only the protocol (prometheus_client and aiohttp load with
the backend).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from schedd.obs._health import Health
from schedd.obs._recorder import GaugeValue, MetricsRecorder, NoopRecorder

if TYPE_CHECKING:
    from schedd.obs._prometheus import MetricsInterceptor as MetricsInterceptor
    from schedd.obs._prometheus import MetricsServer as MetricsServer
    from schedd.obs._prometheus import PrometheusRecorder as PrometheusRecorder
    from schedd.obs._prometheus import metrics_server as metrics_server

#: The backend's names, imported from ``schedd.obs._prometheus`` when first asked for.
_PROMETHEUS = frozenset(
    {"MetricsInterceptor", "MetricsServer", "PrometheusRecorder", "metrics_server"}
)


def __getattr__(name: str) -> Any:
    if name in _PROMETHEUS:
        value = getattr(importlib.import_module("schedd.obs._prometheus"), name)
        globals()[name] = value  # once: later lookups find it without this hook
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["GaugeValue", "Health", "MetricsRecorder", "NoopRecorder"]

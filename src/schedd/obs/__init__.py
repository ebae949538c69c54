"""Observability seams: what nodes and workers report, behind one recorder protocol.

A recorder is given to a worker (``Worker(..., recorder=...)``) or a node and is called on
their hot paths, so every method must be cheap and must not raise. The default,
:class:`NoopRecorder`, does nothing; a Prometheus or OpenTelemetry backend is one new file
implementing :class:`MetricsRecorder`. :class:`Health` is a node's gRPC health service.
"""

from schedd.obs._health import Health
from schedd.obs._recorder import MetricsRecorder, NoopRecorder

__all__ = ["Health", "MetricsRecorder", "NoopRecorder"]

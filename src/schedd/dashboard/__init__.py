"""The node's web dashboard (``--http-listen``): cluster, jobs, runs, dead letters, lateness;
and :class:`Surfaces`, which serves it and the metrics endpoint around a running node."""

from schedd.dashboard._server import DashboardServer
from schedd.dashboard._surfaces import Surfaces

__all__ = ["DashboardServer", "Surfaces"]

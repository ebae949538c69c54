"""The node's web dashboard (``--http-listen``): cluster, jobs, runs, dead letters, lateness."""

from schedd.dashboard._server import DashboardServer

__all__ = ["DashboardServer"]

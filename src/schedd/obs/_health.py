"""The standard gRPC health service of a node (``grpc.health.v1``), serving or not as a whole."""

from __future__ import annotations

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

#: The service names a node answers for: the server as a whole and each of its services.
SERVICES = ("", "schedd.v1.Scheduler", "schedd.v1.Worker")


class Health:
    """SERVING while the node can do its work (its store is reachable), NOT_SERVING otherwise.

    Load balancers and ``grpc_health_probe`` ask it; the node sets it.
    """

    def __init__(self) -> None:
        self.servicer = health.HealthServicer()
        self.serving = False
        self.set_serving(False)

    def add_to_server(self, server: grpc.aio.Server) -> None:
        health_pb2_grpc.add_HealthServicer_to_server(self.servicer, server)

    @property
    def service_name(self) -> str:
        """The health service's full name (for reflection)."""
        return str(health_pb2.DESCRIPTOR.services_by_name["Health"].full_name)

    def set_serving(self, serving: bool) -> None:
        self.serving = serving
        status = (
            health_pb2.HealthCheckResponse.SERVING
            if serving
            else health_pb2.HealthCheckResponse.NOT_SERVING
        )
        for name in SERVICES:
            self.servicer.set(name, status)

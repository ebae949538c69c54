"""The node's gRPC server: the client API behind its gate, the peer service, the workers'
streams, health and reflection, on one port (TLS when configured)."""

from __future__ import annotations

import grpc
from grpc_reflection.v1alpha import reflection

from schedd._errors import Unavailable
from schedd._limits import message_size_options
from schedd.auth import ApiGate
from schedd.dispatch import Dispatcher
from schedd.node._api import NodeApi
from schedd.node._cluster_views import PeerAnswers
from schedd.node._config import NodeConfig
from schedd.node._servicer import PeerServicer, SchedulerServicer
from schedd.obs import Health, MetricsRecorder
from schedd.v1 import peer_pb2, peer_pb2_grpc, scheduler_pb2, scheduler_pb2_grpc, worker_pb2

#: Options of the node's gRPC server besides the message size limits (``max_message_bytes``).
SERVER_OPTIONS = [
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.min_recv_ping_interval_without_data_ms", 5_000),
    ("grpc.http2.max_ping_strikes", 0),
]


class NodeServer:
    """One node's gRPC port and the services on it.

    Args:
        recorder: with metrics on, every call's outcome and duration is recorded.
    """

    def __init__(
        self,
        config: NodeConfig,
        api: NodeApi,
        gate: ApiGate,
        peers: PeerAnswers,
        peer_secret: str | None,
        dispatcher: Dispatcher,
        health: Health,
        recorder: MetricsRecorder | None,
    ) -> None:
        self.config = config
        self.health = health
        self.port = 0
        interceptors = []
        if recorder is not None:
            from schedd.obs import MetricsInterceptor

            interceptors.append(MetricsInterceptor(recorder.grpc_request))
        options = [*SERVER_OPTIONS, *message_size_options(config.max_message_bytes)]
        self.server = grpc.aio.server(options=options, interceptors=interceptors)
        servicer = SchedulerServicer(api, gate)
        scheduler_pb2_grpc.add_SchedulerServicer_to_server(servicer, self.server)
        peer_pb2_grpc.add_PeerServicer_to_server(PeerServicer(peers, peer_secret), self.server)
        dispatcher.add_to_server(self.server)
        health.add_to_server(self.server)
        names = (
            scheduler_pb2.DESCRIPTOR.services_by_name["Scheduler"].full_name,
            worker_pb2.DESCRIPTOR.services_by_name["Worker"].full_name,
            peer_pb2.DESCRIPTOR.services_by_name["Peer"].full_name,
            health.service_name,
            reflection.SERVICE_NAME,
        )
        reflection.enable_server_reflection(names, self.server)

    @property
    def address(self) -> str:
        """Where peers, workers and clients reach this node (``advertise``, or the port)."""
        host = self.config.listen.rpartition(":")[0]
        return self.config.advertise or f"{host}:{self.port}"

    def security(self) -> str:
        """How the port is secured, for the node's start line."""
        tls = self.config.tls
        if tls is None:
            return "plaintext"
        return "TLS, client certificates required" if tls.ca_file else "TLS"

    async def start(self) -> None:
        cfg = self.config
        if cfg.tls is None:
            self.port = self.server.add_insecure_port(cfg.listen)
        else:
            self.port = self.server.add_secure_port(cfg.listen, cfg.tls.server_credentials())
        if self.port == 0:
            raise Unavailable(f"cannot listen on {cfg.listen}")
        await self.server.start()

    async def stop(self, grace_s: float) -> None:
        await self.server.stop(grace_s)

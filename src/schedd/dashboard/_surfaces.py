"""What a node's process serves besides the node's gRPC port: the metrics endpoint and the web
dashboard, started around the node by whoever runs it (``schedd node``, ``schedd dev``)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from schedd.dashboard._server import DashboardServer

if TYPE_CHECKING:
    from schedd.node import NodeConfig, NodeSurface
    from schedd.obs import MetricsServer

log = logging.getLogger(__name__)


class Surfaces:
    """The metrics endpoint (``metrics_listen``) and the dashboard (``http_listen``) of one
    node, each only when configured; :meth:`stop` stops both (the dashboard first)."""

    def __init__(self) -> None:
        self.metrics: MetricsServer | None = None
        self.dashboard: DashboardServer | None = None

    @classmethod
    async def start(cls, node: NodeSurface, config: NodeConfig) -> Surfaces:
        out = cls()
        try:
            if config.metrics_listen:
                from schedd.obs import metrics_server

                out.metrics = metrics_server(node.recorder, config.metrics_listen, tls=config.tls)
                if out.metrics is None:
                    log.warning(
                        "--metrics-listen %s: this node's recorder exports its own way; no "
                        "/metrics endpoint served", config.metrics_listen,
                    )  # fmt: skip
                else:
                    await out.metrics.start()
            if config.http_listen:
                out.dashboard = DashboardServer(
                    node, config.http_listen, actions=config.http_actions, tls=config.tls
                )
                await out.dashboard.start()
        except BaseException:
            await out.stop()
            raise
        return out

    async def stop(self) -> None:
        if self.dashboard is not None:
            await self.dashboard.stop()
        if self.metrics is not None:
            await self.metrics.stop()

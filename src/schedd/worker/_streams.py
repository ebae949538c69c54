"""The set of streams a worker keeps: one per given endpoint, and one per node discovery
found (see ``schedd.worker._discovery``), until the worker stops.

:class:`Streams` opens, revives and closes the :class:`NodeConnection`\\ s; the worker owns
the credits and the attempts that run on them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from schedd.worker._config import WorkerConfig
from schedd.worker._connection import CHANNEL_OPTIONS, NodeConnection, StreamOwner
from schedd.worker._discovery import Discovery, NodeDirectory, StatusQuery


class Streams:
    """The worker's streams by endpoint, and the discovery that adds and forgets them.

    Invariant: at most one stream per endpoint; one that is being closed because its node
    left is in :attr:`leaving` until it has closed, so a worker that stops stops it too.
    """

    def __init__(
        self, owner: StreamOwner, config: WorkerConfig, stopping: Callable[[], bool]
    ) -> None:
        """Args:
        owner: The worker the streams serve.
        config: Endpoints, reconnect backoff, TLS, discovery settings.
        stopping: True once the worker stops: no stream is opened or revived then.
        """
        self._owner = owner
        self._config = config
        self._stopping = stopping
        #: The streams by endpoint: the given ones, and those discovery added.
        self.conns: dict[str, NodeConnection] = {}
        #: Streams being closed because their node left (stopped too if the worker stops).
        self.leaving: set[NodeConnection] = set()
        self._discovery_task: asyncio.Task[None] | None = None
        self._status_query: StatusQuery | None = None

    def start(self, metadata: tuple[tuple[str, str], ...], clock: Callable[[], float]) -> None:
        """Open a stream to every given endpoint and, with ``discover``, start asking the
        nodes for the live members (calls with ``metadata``; ``clock``: monotonic seconds)."""
        cfg = self._config
        for ep in cfg.endpoints:
            self.connect(ep)
        if not cfg.discover:
            return
        self._status_query = StatusQuery(CHANNEL_OPTIONS, tls=cfg.tls, metadata=metadata)
        discovery = Discovery(
            cfg.endpoints,
            NodeDirectory(cfg.forget_node_after_s),
            interval_s=cfg.discovery_interval_s,
            query=self._status_query,
            connections=self.connections,
            connect=self.connect,
            forget=self.forget,
            clock=clock,
            revive=self.revive,
        )
        self._discovery_task = asyncio.create_task(discovery.run(), name="schedd-worker-discovery")

    async def stop(self, graceful: bool) -> None:
        """Stop discovery, then every stream (gracefully: what is buffered is written)."""
        await self.stop_discovery()
        await asyncio.gather(*(c.stop(graceful=graceful) for c in self.all()))

    @property
    def endpoints(self) -> list[str]:
        """The endpoints with a stream (given and discovered), sorted."""
        return sorted(self.conns)

    @property
    def live_endpoints(self) -> list[str]:
        """The endpoints whose stream is open and welcomed now, sorted."""
        return sorted(ep for ep, c in self.conns.items() if c.live)

    def connections(self) -> dict[str, str | None]:
        """Endpoint -> the node id that welcomed its open stream (None while it has none).

        A stream that is down counts for no node: a node restarted on another address is
        then connected at its new one, instead of counting as covered by the old endpoint
        (which it welcomed once) until that is forgotten.
        """
        return {
            ep: (c.welcome.node_id or None) if c.live and c.welcome is not None else None
            for ep, c in self.conns.items()
        }

    def connect(self, endpoint: str) -> None:
        """Start keeping a stream to ``endpoint`` (nothing if there is one, or stopping)."""
        if endpoint in self.conns or self._stopping():
            return
        cfg = self._config
        conn = NodeConnection(
            self._owner,
            endpoint,
            backoff=(cfg.reconnect_min_s, cfg.reconnect_max_s),
            close_timeout_s=cfg.stream_close_timeout_s,
            tls=cfg.tls,
        )
        self.conns[endpoint] = conn
        conn.start()

    def revive(self, endpoint: str) -> None:
        """Reconnect the stream to ``endpoint`` now instead of after its backoff."""
        conn = self.conns.get(endpoint)
        if conn is not None and not self._stopping():
            conn.retry_now()

    async def forget(self, endpoint: str) -> bool:
        """Close the stream to a node that left, unless executions it dispatched still run
        (their results go back on it): then keep it, and return False."""
        conn = self.conns.get(endpoint)
        if conn is None:
            return True
        if conn.running > 0 or self._stopping():
            return False
        del self.conns[endpoint]
        self.leaving.add(conn)
        # Cancelled here (the worker stops), it stays in leaving for stop() to finish.
        await conn.stop(graceful=True)  # its credits come back through stream_ended
        self.leaving.discard(conn)
        return True

    def all(self) -> list[NodeConnection]:
        """Every stream, those closing because their node left included."""
        return [*self.conns.values(), *self.leaving]

    async def stop_discovery(self) -> None:
        task, self._discovery_task = self._discovery_task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        if self._status_query is not None:
            await self._status_query.close()
            self._status_query = None

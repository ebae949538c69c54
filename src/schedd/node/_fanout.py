"""Asking every live node for its part of a cluster-wide view, in parallel, with a deadline.

The node that received a ``run list``, ``run get`` or ``cluster status`` calls
:meth:`Fanout.ask` with two ways to get a part: ``local`` for itself (a plain call, no RPC)
and ``remote`` for each peer (an RPC on the internal ``Peer`` service, which answers from the
peer alone, so nothing recurses). A peer that does not answer within ``timeout_s`` (down,
frozen, unreachable) does not hold the answer up: it is reported as a ``MissingNode`` with the
reason, and the caller says so in its response.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TypeVar, cast

import grpc
import grpc.aio

from schedd._limits import GRPC_MAX_MESSAGE_BYTES, message_size_options
from schedd._tls import TlsFiles
from schedd.node._views import missing_node
from schedd.v1 import peer_pb2_grpc, scheduler_pb2

log = logging.getLogger(__name__)

T = TypeVar("T")

#: Channel options of the node-to-node channels besides the message size limits (answers
#: can be whole pages of executions: the node's own ``max_message_bytes``).
_CHANNEL_OPTIONS = [
    # A peer's channel is kept: gRPC's default backoff (growing to 120 s) would leave a peer
    # that was down for a while "missing" from every view long after it came back.
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 1_000),
]


def _wildcard(address: str) -> bool:
    return address.rpartition(":")[0].strip("[]") in ("", "0.0.0.0", "::")


class Fanout:
    """Parts of a view from this node and every live peer.

    Args:
        node_id: this node (answered by ``local``, never dialled).
        members: node id -> advertised gRPC address of every live node, as membership sees
            it now (called at every ask).
        timeout_s: the deadline of each peer's answer.
        tls: the node's TLS settings (None: plaintext). Peers are verified against its CA
            (or the system's) and shown its certificate as client certificate.
        max_message_bytes: the message size limit of the calls to peers, both ways.
    """

    def __init__(
        self,
        node_id: str,
        members: Callable[[], Mapping[str, str]],
        timeout_s: float,
        *,
        tls: TlsFiles | None = None,
        max_message_bytes: int = GRPC_MAX_MESSAGE_BYTES,
        interceptors: Sequence[grpc.aio.ClientInterceptor] = (),
    ) -> None:
        self.node_id = node_id
        self.members = members
        self.timeout_s = timeout_s
        self._channels: dict[str, grpc.aio.Channel] = {}
        #: With auth on: adds the cluster's peer secret to every call (see :mod:`schedd.auth`).
        self.interceptors = list(interceptors)
        self._options: list[tuple[str, str | int]] = [
            *_CHANNEL_OPTIONS,
            *message_size_options(max_message_bytes),
        ]
        self._credentials: grpc.ChannelCredentials | None = None
        if tls is not None:
            self._credentials = tls.channel_credentials()
            self._options += tls.channel_options()

    async def ask(
        self,
        local: Callable[[], Awaitable[T]],
        remote: Callable[[peer_pb2_grpc.PeerAsyncStub, float], Awaitable[T]],
    ) -> tuple[dict[str, T], list[scheduler_pb2.MissingNode]]:
        """Each answering node's part (by node id) and the nodes that did not answer.

        ``remote(stub, timeout_s)`` makes the peer's call. A failure of ``local`` raises (this
        node cannot answer at all); a peer's failure only makes it missing.
        """
        members = dict(self.members())
        members.pop(self.node_id, None)
        await self._keep_only(set(members.values()))
        peers = sorted(members.items())
        results = await asyncio.gather(
            local(), *(self._one(node_id, address, remote) for node_id, address in peers)
        )
        parts: dict[str, T] = {self.node_id: cast(T, results[0])}
        missing: list[scheduler_pb2.MissingNode] = []
        for (node_id, _address), result in zip(peers, results[1:], strict=True):
            if isinstance(result, scheduler_pb2.MissingNode):
                missing.append(result)
            else:
                parts[node_id] = result
        return parts, missing

    async def _one(
        self,
        node_id: str,
        address: str,
        remote: Callable[[peer_pb2_grpc.PeerAsyncStub, float], Awaitable[T]],
    ) -> T | scheduler_pb2.MissingNode:
        if _wildcard(address):
            why = f"it advertises {address!r}, which cannot be dialled (start it with --advertise)"
            return missing_node(node_id, address, why)
        stub = peer_pb2_grpc.PeerStub(self._channel(address))
        try:
            # The guard covers a channel that never gets to apply its own deadline.
            return await asyncio.wait_for(remote(stub, self.timeout_s), self.timeout_s + 0.5)
        except TimeoutError:
            why = f"no answer within {int(self.timeout_s * 1000)} ms"
        except grpc.aio.AioRpcError as exc:
            if exc.code() == grpc.StatusCode.DEADLINE_EXCEEDED:
                why = f"no answer within {int(self.timeout_s * 1000)} ms"
            else:
                # gRPC's connection details run long ("...; last error: ..."): the first clause.
                details = " ".join((exc.details() or "").split(";")[0].split())
                why = f"{exc.code().name}: {details}" if details else exc.code().name
        log.info("cluster view: node %s (%s) did not answer: %s", node_id, address, why)
        return missing_node(node_id, address, why)

    def _channel(self, address: str) -> grpc.aio.Channel:
        channel = self._channels.get(address)
        if channel is None:
            if self._credentials is None:
                channel = grpc.aio.insecure_channel(
                    address, options=self._options, interceptors=self.interceptors or None
                )
            else:
                channel = grpc.aio.secure_channel(
                    address, self._credentials, self._options,
                    interceptors=self.interceptors or None,
                )  # fmt: skip
            self._channels[address] = channel
        return channel

    async def _keep_only(self, addresses: set[str]) -> None:
        for address in [a for a in self._channels if a not in addresses]:
            with contextlib.suppress(Exception):
                await self._channels.pop(address).close()

    async def close(self) -> None:
        """Closes every channel (the node is stopping)."""
        await self._keep_only(set())

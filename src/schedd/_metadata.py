"""The metadata schedd's calls carry (tokens, the peer secret), and the channel interceptor
that adds it. Light on purpose: the client SDK imports it."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import grpc
import grpc.aio

#: The metadata key a bearer token travels in (gRPC metadata keys are lower case).
AUTHORIZATION = "authorization"
#: The metadata key the cluster's peer secret travels in (node to node).
PEER_METADATA = "x-schedd-peer"


def metadata_value(context: grpc.aio.ServicerContext[Any, Any], key: str) -> str | None:
    """The value a call carries under ``key`` (the first one), or None."""
    for k, v in context.invocation_metadata() or ():
        if k == key:
            return v if isinstance(v, str) else v.decode()
    return None


class MetadataInterceptor(grpc.aio.UnaryUnaryClientInterceptor):
    """Adds one metadata entry to every unary call of a channel (a peer secret, a token)."""

    def __init__(self, key: str, value: str) -> None:
        self._entry = (key, value)

    async def intercept_unary_unary(
        self,
        continuation: Callable[[grpc.aio.ClientCallDetails, Any], Awaitable[Any]],
        client_call_details: grpc.aio.ClientCallDetails,
        request: Any,
    ) -> Any:
        metadata = list(client_call_details.metadata or ())
        metadata.append(self._entry)
        details = grpc.aio.ClientCallDetails(
            client_call_details.method,
            client_call_details.timeout,
            grpc.aio.Metadata(*metadata),
            client_call_details.credentials,
            client_call_details.wait_for_ready,
        )
        return await continuation(details, request)

"""How large a message may be on the wire: gRPC messages and HTTP request bodies.

Every gRPC server and channel of schedd sets both limits explicitly, so a peer that sends too
much is refused with RESOURCE_EXHAUSTED ("Received message larger than max") instead of
making the receiver allocate whatever it announces. What schedd itself sends stays far below:
a job's payload is at most 256 KiB, a node's dispatch batch and a worker's result batch are
sealed at 3 MiB, and :meth:`~schedd.client.AsyncClient.create_jobs` splits its calls to stay
under half the limit.
"""

from __future__ import annotations

#: The default limit of one gRPC message, each way (``schedd node --max-message-bytes``).
GRPC_MAX_MESSAGE_BYTES = 16 << 20
#: The smallest limit a node accepts: a dispatch or result batch (3 MiB) must fit.
GRPC_MIN_MESSAGE_BYTES = 4 << 20
#: The largest HTTP request body the dashboard and the metrics endpoint read (forms only).
HTTP_MAX_REQUEST_BYTES = 64 << 10


def message_size_options(limit: int = GRPC_MAX_MESSAGE_BYTES) -> list[tuple[str, int]]:
    """gRPC channel or server options that bound messages to ``limit`` bytes both ways."""
    return [
        ("grpc.max_receive_message_length", limit),
        ("grpc.max_send_message_length", limit),
    ]

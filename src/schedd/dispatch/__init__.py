"""The node's end of the worker protocol (``schedd.v1.Worker/Connect``).

The node constructs a :class:`Dispatcher` with its :class:`ExecutionAuthority` (token checks,
what happens after a loss), registers it on its gRPC server, and :meth:`Dispatcher.submit`\\ s
executions as they fire::

    server = grpc.aio.server(options=KEEPALIVE_SERVER_OPTIONS)
    dispatcher = Dispatcher("node-1", authority)
    dispatcher.add_to_server(server)
    await server.start(); await dispatcher.start()
    dispatcher.submit([worker_pb2.Dispatch(execution_id="e1", fencing_token=7, ...)])
    ...
    await dispatcher.stop()  # settles what arrived, then ends every stream
"""

from schedd.dispatch._config import (
    KEEPALIVE_SERVER_OPTIONS,
    REASON_DISCONNECTED,
    REASON_LEASE_EXPIRED,
    DispatchConfig,
    DispatchStats,
    ExecutionAuthority,
    InFlight,
)
from schedd.dispatch._dispatcher import Dispatcher
from schedd.dispatch._pending import Route, accepts, route_of, route_of_job
from schedd.dispatch._probes import ProbeAnswer
from schedd.dispatch._queues import QueueLoad, queue_loads
from schedd.dispatch._waiting import describe_route, unserved_warnings

__all__ = [
    "KEEPALIVE_SERVER_OPTIONS",
    "REASON_DISCONNECTED",
    "REASON_LEASE_EXPIRED",
    "DispatchConfig",
    "DispatchStats",
    "Dispatcher",
    "ExecutionAuthority",
    "InFlight",
    "ProbeAnswer",
    "QueueLoad",
    "Route",
    "accepts",
    "describe_route",
    "queue_loads",
    "route_of",
    "route_of_job",
    "unserved_warnings",
]

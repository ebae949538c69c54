"""Pending dispatches, grouped by route, handed out round robin across tenants.

A *route* is what decides which workers may take a dispatch: its queue plus either the handler
name or the kind of target (http, shell). Keeping one queue per route means a dispatch that no
connected worker can run never blocks one behind it that some worker can.

Worked example: tenants ``a`` (3 dispatches) and ``b`` (1) on route (``default``, ``echo``)
come out ``a1 b1 a2 a3``.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Iterator, Sequence
from typing import NamedTuple, Protocol

from schedd.model import DEFAULT_QUEUE, dispatch_queue
from schedd.v1 import job_pb2, worker_pb2

KIND_HANDLER = "handler"
KIND_HTTP = "http"
KIND_SHELL = "shell"
KIND_UNKNOWN = "unknown"


class Route(NamedTuple):
    """Which workers may run a dispatch: ``kind`` is handler/http/shell, ``name`` the handler.

    A tuple: built, hashed and compared once per dispatch, in C.
    """

    queue: str
    kind: str
    name: str = ""


def route_of(dispatch: worker_pb2.Dispatch) -> Route:
    """The route of a dispatch: its handler if set, else the kind of its serialized target."""
    if dispatch.handler:
        return Route(dispatch.queue, KIND_HANDLER, dispatch.handler)
    job = job_pb2.Job()
    try:
        job.ParseFromString(dispatch.target)
    except Exception:  # a corrupt target can run nowhere; park it under its own route
        return Route(dispatch.queue, KIND_UNKNOWN)
    kind = job.WhichOneof("target")
    if kind == "http":
        return Route(dispatch.queue, KIND_HTTP)
    if kind == "shell":
        return Route(dispatch.queue, KIND_SHELL)
    if kind == "handler":
        return Route(dispatch.queue, KIND_HANDLER, job.handler.name)
    return Route(dispatch.queue, KIND_UNKNOWN)


def route_of_job(job: job_pb2.Job) -> Route:
    """The route every dispatch of ``job`` takes (what :func:`route_of` finds in them)."""
    queue = dispatch_queue(job) or DEFAULT_QUEUE  # as firing does with an unset queue
    kind = job.WhichOneof("target")
    if kind == "handler":
        return Route(queue, KIND_HANDLER, job.handler.name)
    if kind == "http":
        return Route(queue, KIND_HTTP)
    if kind == "shell":
        return Route(queue, KIND_SHELL)
    return Route(queue, KIND_UNKNOWN)


class Serves(Protocol):
    """What a worker says it runs: its Hello, or a node's :class:`WorkerStatus` of it."""

    @property
    def queues(self) -> Sequence[str]: ...
    @property
    def handlers(self) -> Sequence[str]: ...
    @property
    def accepts_http(self) -> bool: ...
    @property
    def accepts_shell(self) -> bool: ...


def accepts(hello: Serves, route: Route) -> bool:
    """Whether a worker that said ``hello`` may be sent dispatches of ``route``."""
    if route.queue not in hello.queues:
        return False
    if route.kind == KIND_HANDLER:
        return route.name in hello.handlers
    if route.kind == KIND_HTTP:
        return hello.accepts_http
    if route.kind == KIND_SHELL:
        return hello.accepts_shell
    return False


class _TenantRing:
    """Per-tenant FIFOs taken from in rotation."""

    def __init__(self) -> None:
        self._by_tenant: OrderedDict[str, deque[worker_pb2.Dispatch]] = OrderedDict()

    def push(self, dispatch: worker_pb2.Dispatch) -> None:
        self._by_tenant.setdefault(dispatch.tenant, deque()).append(dispatch)

    def pop(self) -> worker_pb2.Dispatch | None:
        """The next dispatch of the tenant whose turn it is, or None when empty."""
        if not self._by_tenant:
            return None
        return self._take(*next(iter(self._by_tenant.items())))

    def pop_from(self, tenants: frozenset[str]) -> worker_pb2.Dispatch | None:
        """The next dispatch of the first of ``tenants`` in turn, or None (for a worker whose
        token is limited to them; the others keep their turn)."""
        for tenant, fifo in self._by_tenant.items():
            if tenant in tenants:
                return self._take(tenant, fifo)
        return None

    def _take(self, tenant: str, fifo: deque[worker_pb2.Dispatch]) -> worker_pb2.Dispatch:
        """The head of ``tenant``'s FIFO; the tenant goes to the back of the turn (or away)."""
        dispatch = fifo.popleft()
        if fifo:
            self._by_tenant.move_to_end(tenant)
        else:
            del self._by_tenant[tenant]
        return dispatch

    def __bool__(self) -> bool:
        return bool(self._by_tenant)

    def __iter__(self) -> Iterator[worker_pb2.Dispatch]:
        for fifo in self._by_tenant.values():
            yield from fifo


class PendingDispatches:
    """Dispatches waiting for a worker with credits.

    Removal by execution id is O(1): the id index is the truth, and entries whose id no longer
    maps to the same message are skipped when they come up (tombstones).
    """

    def __init__(self) -> None:
        self._routes: OrderedDict[Route, _TenantRing] = OrderedDict()
        self._by_id: dict[str, worker_pb2.Dispatch] = {}

    def __len__(self) -> int:
        return len(self._by_id)

    def __contains__(self, execution_id: object) -> bool:
        return execution_id in self._by_id

    def get(self, execution_id: str) -> worker_pb2.Dispatch | None:
        return self._by_id.get(execution_id)

    def add(self, dispatch: worker_pb2.Dispatch) -> None:
        """Queue a dispatch; one already pending under the same id is replaced."""
        self._by_id[dispatch.execution_id] = dispatch
        route = route_of(dispatch)
        ring = self._routes.get(route)
        if ring is None:
            ring = self._routes[route] = _TenantRing()
        ring.push(dispatch)

    def remove(self, execution_id: str) -> worker_pb2.Dispatch | None:
        """Drop a pending dispatch; returns it, or None if it was not pending."""
        return self._by_id.pop(execution_id, None)

    def dispatches(self) -> list[worker_pb2.Dispatch]:
        """The live pending dispatches (a snapshot, in no particular order)."""
        return list(self._by_id.values())

    def count(self, route: Route) -> int:
        """How many live dispatches wait on ``route`` (a pass over its queue)."""
        ring = self._routes.get(route)
        return 0 if ring is None else sum(1 for d in ring if self._by_id.get(d.execution_id) is d)

    def servable(self, workers: Sequence[Serves]) -> bool:
        """Whether a dispatch waits that one of ``workers`` may take (once it has credits)."""
        return bool(self._by_id) and any(accepts(w, r) for r in self._routes for w in workers)

    def routes(self) -> Iterator[Route]:
        """Routes that may hold live dispatches (a snapshot: safe to pop while iterating)."""
        return iter(list(self._routes))

    def pop(
        self, route: Route, tenants: frozenset[str] | None = None
    ) -> worker_pb2.Dispatch | None:
        """The next live dispatch of ``route`` (tenants in rotation), or None; with
        ``tenants``, only theirs."""
        ring = self._routes.get(route)
        while ring:
            dispatch = ring.pop() if tenants is None else ring.pop_from(tenants)
            if dispatch is None:
                return None
            if dispatch is not None and self._by_id.get(dispatch.execution_id) is dispatch:
                del self._by_id[dispatch.execution_id]
                if not ring:
                    del self._routes[route]
                return dispatch
        self._routes.pop(route, None)
        return None

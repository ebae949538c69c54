"""Why dispatches wait, and since when: what ``run get`` and the dashboard tell a person.

A dispatch waits in memory (:class:`~._pending.PendingDispatches`) until a worker that may
take its route has a credit. Waiting for a credit is ordinary backlog; waiting for a worker
that does not exist is not: nothing will ever run it until one connects. :class:`Waiting`
notes, per route, when it was first seen pending with no connected worker that serves it,
and words the reason; the dispatcher reviews the pending routes after each submit and
whenever a stream opens or closes, so the cost is a look at a few routes, not per dispatch.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import NamedTuple

from schedd._clock import Clock
from schedd.dispatch._pending import (
    KIND_HANDLER,
    KIND_HTTP,
    KIND_SHELL,
    Route,
    Serves,
    accepts,
    route_of_job,
)
from schedd.dispatch._session import WorkerSession
from schedd.v1 import job_pb2


class Reason(NamedTuple):
    """Why one dispatch waits: ``text`` in words, ``since_ms`` (wall clock) when the route
    began to wait for a worker (0: it waits for a free slot, which is ordinary)."""

    text: str
    since_ms: int
    unserved: bool


def describe_route(route: Route) -> str:
    """``handler 'send' on queue 'mail'``, ``shell jobs on queue 'default'`` ..."""
    if route.kind == KIND_HANDLER:
        what = f"handler {route.name!r}"
    elif route.kind == KIND_HTTP:
        what = "http jobs"
    elif route.kind == KIND_SHELL:
        what = "shell jobs (a worker started with --allow-shell)"
    else:
        what = "this job's target"
    return f"{what} on queue {route.queue!r}"


def unserved_warning(route: Route, workers: Iterable[Serves], runs: str = "its runs") -> str | None:
    """``no connected worker serves handler 'x' on queue 'q': its runs will wait until one
    connects`` when none of ``workers`` serves ``route``; None when one does."""
    if any(accepts(w, route) for w in workers):
        return None
    where = describe_route(route)
    return f"no connected worker serves {where}: {runs} will wait until one connects"


def unserved_warnings(jobs: Sequence[job_pb2.Job], workers: Sequence[Serves]) -> list[str]:
    """One warning per target of ``jobs`` that none of ``workers`` serves, naming the jobs
    (``schedctl apply`` prints them after applying)."""
    names: dict[Route, list[str]] = {}
    for job in jobs:
        names.setdefault(route_of_job(job), []).append(job.name or job.id)
    out = []
    for route, of in names.items():
        shown = ", ".join(repr(n) for n in of[:3]) + (
            f" and {len(of) - 3} more" if len(of) > 3 else ""
        )
        warning = unserved_warning(route, workers, f"the runs of {shown}")
        if warning:
            out.append(warning)
    return out


class Waiting:
    """Per route: since when no connected worker serves it (see the module docstring)."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._unserved: dict[Route, int] = {}  # route -> wall ms it was first seen unserved
        self._served: set[Route] = set()  # routes some open stream serves (a cache)

    def review(self, routes: Iterable[Route], sessions: Iterable[WorkerSession]) -> None:
        """Looks at ``routes`` (those with pending dispatches) not known to be served."""
        now, live = None, None
        for route in routes:
            if route in self._served:
                continue
            if live is None:
                live = [s for s in sessions if not s.closed]
            if any(accepts(s.hello, route) for s in live):
                self._served.add(route)
                self._unserved.pop(route, None)
            elif route not in self._unserved:
                now = now if now is not None else self._clock.now_ms()
                self._unserved[route] = now

    def streams_changed(self, routes: Iterable[Route], sessions: Iterable[WorkerSession]) -> None:
        """A stream opened or closed: what serves which route is looked at afresh."""
        self._served.clear()
        pending = set(routes)
        for route in [r for r in self._unserved if r not in pending]:
            del self._unserved[route]  # nothing waits on it any more
        self.review(pending, sessions)

    def reason(self, route: Route, tenant: str, sessions: Iterable[WorkerSession]) -> Reason:
        """Why a dispatch of ``tenant`` on ``route`` waits now."""
        since = self._unserved.get(route)
        where = describe_route(route)
        if since is not None:
            return Reason(f"no worker serves {where}", since, True)
        eligible = [s for s in sessions if not s.closed and accepts(s.hello, route)]
        if not eligible:  # not reviewed yet (between a submit and its review)
            return Reason(f"no worker serves {where}", self._clock.now_ms(), True)
        if not any(s.tenants is None or tenant in s.tenants for s in eligible):
            return Reason(
                f"no worker may run tenant {tenant!r}'s work for {where} (the tokens of "
                f"the {len(eligible)} that serve it name other tenants)",
                0,
                True,
            )
        return Reason(f"every worker serving {where} is busy ({len(eligible)} connected)", 0, False)

    def unserved(self) -> dict[Route, int]:
        """Routes nobody serves, with the wall ms they were first seen so."""
        return dict(self._unserved)

    def unserved_by_queue(self, pending: Callable[[Route], int]) -> dict[str, tuple[int, int]]:
        """Per queue: executions pending (``pending(route)`` counts them) on routes nobody
        serves, and the wall ms the oldest such route was first seen so."""
        out: dict[str, tuple[int, int]] = {}
        for route, since in self._unserved.items():
            n = pending(route)
            if not n:
                continue
            count, oldest = out.get(route.queue, (0, since))
            out[route.queue] = (count + n, min(oldest, since))
        return out

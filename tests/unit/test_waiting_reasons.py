"""Why a dispatch waits, and since when (pure: a manual clock and stand-in streams)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from schedd._clock import ManualClock
from schedd.dispatch import Route, unserved_warnings
from schedd.dispatch._waiting import Waiting
from schedd.v1 import job_pb2, worker_pb2

MAIL = Route("mail", "handler", "send")
SHELL = Route("default", "shell")


@dataclass
class Stream:
    """What :class:`Waiting` reads of a worker stream."""

    hello: worker_pb2.Hello
    tenants: frozenset[str] | None = None
    closed: bool = False


def stream(*handlers: str, queue: str = "mail", shell: bool = False, **kw: Any) -> Stream:
    hello = worker_pb2.Hello(
        worker_id="w", queues=[queue], handlers=list(handlers), accepts_shell=shell
    )
    return Stream(hello, **kw)


def test_a_route_nobody_serves_says_so_from_when_it_was_first_seen() -> None:
    clock = ManualClock(1_000_000)
    w = Waiting(clock)
    streams: list[Any] = [stream("other")]
    w.review([MAIL], streams)
    clock.advance(30)
    w.review([MAIL], streams)  # still unserved: the first sighting stays
    why = w.reason(MAIL, "acme", streams)
    assert why.unserved and why.since_ms == 1_000_000
    assert why.text == "no worker serves handler 'send' on queue 'mail'"
    assert w.unserved() == {MAIL: 1_000_000}

    streams.append(stream("send"))
    w.streams_changed([MAIL], streams)  # a worker that serves it connected
    why = w.reason(MAIL, "acme", streams)
    assert not why.unserved and why.since_ms == 0
    assert why.text == "every worker serving handler 'send' on queue 'mail' is busy (1 connected)"
    assert w.unserved() == {}

    streams[1].closed = True  # it left again: the wait starts anew, now
    clock.advance(5)
    w.streams_changed([MAIL], streams)
    assert w.reason(MAIL, "acme", streams).since_ms == 1_035_000


def test_tenant_limited_workers_and_kinds_are_named() -> None:
    clock = ManualClock(0)
    w = Waiting(clock)
    streams: list[Any] = [stream("send", tenants=frozenset({"bolt"}))]
    w.review([MAIL], streams)
    why = w.reason(MAIL, "acme", streams)
    assert why.unserved and "tenant 'acme'" in why.text
    assert w.reason(MAIL, "bolt", streams).unserved is False
    w.review([SHELL], streams)
    assert w.reason(SHELL, "acme", streams).text == (
        "no worker serves shell jobs (a worker started with --allow-shell) on queue 'default'"
    )


def test_routes_no_longer_pending_are_forgotten() -> None:
    w = Waiting(ManualClock(0))
    w.review([MAIL], [])
    w.streams_changed([], [])
    assert w.unserved() == {}


def test_apply_warnings_group_jobs_by_target() -> None:
    jobs = [
        job_pb2.Job(name=f"j{i}", handler=job_pb2.HandlerTarget(name="send", queue="mail"))
        for i in range(5)
    ] + [job_pb2.Job(name="web", http=job_pb2.HttpTarget(url="http://x"))]
    served = [worker_pb2.Hello(queues=["default"], accepts_http=True)]
    assert unserved_warnings(jobs, served) == [
        "no connected worker serves handler 'send' on queue 'mail': the runs of 'j0', 'j1', "
        "'j2' and 2 more will wait until one connects"
    ]
    assert unserved_warnings(jobs[:1], [worker_pb2.Hello(queues=["mail"], handlers=["send"])]) == []

"""Pure tests of routing and pending order."""

from __future__ import annotations

from schedd.dispatch import Route, accepts, route_of
from schedd.dispatch._pending import PendingDispatches
from schedd.v1 import job_pb2, worker_pb2


def _d(eid: str, tenant: str = "t", handler: str = "echo", queue: str = "q") -> worker_pb2.Dispatch:
    return worker_pb2.Dispatch(execution_id=eid, tenant=tenant, handler=handler, queue=queue)


def test_route_of_handler_and_targets() -> None:
    assert route_of(_d("1")) == Route("q", "handler", "echo")
    http = job_pb2.Job()
    http.http.SetInParent()
    d = worker_pb2.Dispatch(execution_id="2", queue="q", target=http.SerializeToString())
    assert route_of(d) == Route("q", "http")
    shell = job_pb2.Job()
    shell.shell.SetInParent()
    d2 = worker_pb2.Dispatch(execution_id="3", queue="q", target=shell.SerializeToString())
    assert route_of(d2) == Route("q", "shell")
    assert route_of(worker_pb2.Dispatch(queue="q", target=b"\xff\xff")).kind == "unknown"


def test_accepts_checks_queue_handler_and_kind() -> None:
    hello = worker_pb2.Hello(worker_id="w", queues=["q"], handlers=["echo"], capacity=1)
    assert accepts(hello, Route("q", "handler", "echo"))
    assert not accepts(hello, Route("q", "handler", "other"))
    assert not accepts(hello, Route("r", "handler", "echo"))
    assert not accepts(hello, Route("q", "http"))
    hello.accepts_http = True
    assert accepts(hello, Route("q", "http"))
    assert not accepts(hello, Route("q", "shell"))


def test_tenants_take_turns() -> None:
    p = PendingDispatches()
    for eid in ("a1", "a2", "a3"):
        p.add(_d(eid, tenant="a"))
    p.add(_d("b1", tenant="b"))
    route = Route("q", "handler", "echo")
    order = []
    while (d := p.pop(route)) is not None:
        order.append(d.execution_id)
    assert order == ["a1", "b1", "a2", "a3"]
    assert len(p) == 0


def test_remove_and_replace_leave_tombstones_skipped() -> None:
    p = PendingDispatches()
    p.add(_d("x"))
    p.add(_d("y"))
    replacement = _d("x")
    replacement.fencing_token = 9
    p.add(replacement)
    assert p.remove("y") is not None
    assert len(p) == 1
    route = Route("q", "handler", "echo")
    got = p.pop(route)
    assert got is not None and got.fencing_token == 9
    assert p.pop(route) is None
    assert list(p.routes()) == []

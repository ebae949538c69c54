"""Probes for executions taken over from a failed owner (schedd.dispatch._probes)."""

from __future__ import annotations

from typing import Any, cast

from schedd.dispatch._probes import Probes
from schedd.v1 import worker_pb2


class FakeSession:
    def __init__(self, session_id: int, handlers: list[str]) -> None:
        self.session_id = session_id
        self.hello = worker_pb2.Hello(worker_id=f"w{session_id}", queues=["default"])
        self.hello.handlers.extend(handlers)
        self.tenants: frozenset[str] | None = None
        self.sent: list[worker_pb2.Dispatch] = []
        self.flushes = 0

    def send_probe(self, d: worker_pb2.Dispatch) -> None:
        self.sent.append(d)

    def flush(self) -> None:
        self.flushes += 1


def dispatch(eid: str, token: int = 7, handler: str = "h") -> worker_pb2.Dispatch:
    return worker_pb2.Dispatch(
        execution_id=eid, fencing_token=token, queue="default", handler=handler
    )


class Answers:
    def __init__(self) -> None:
        self.got: list[tuple[str, bool]] = []

    def __call__(self, eid: str, taken: bool) -> None:
        self.got.append((eid, taken))


def sessions(*s: FakeSession) -> list[Any]:
    return cast(list[Any], list(s))


def test_probe_goes_only_to_sessions_that_accept_its_route_without_changing_the_dispatch() -> None:
    probes, answers = Probes(), Answers()
    a, b = FakeSession(1, ["h"]), FakeSession(2, ["other"])
    d = dispatch("j@1")
    probes.send(sessions(a, b), [d], deadline_ms=1000, answer=answers)
    assert [m.probe for m in a.sent] == [True] and b.sent == []
    assert not d.probe  # the caller's dispatch stays a dispatch (it may become in flight)
    assert "j@1" in probes and answers.got == [] and a.flushes == 1


def test_no_session_to_ask_answers_absent_at_once() -> None:
    probes, answers = Probes(), Answers()
    probes.send(sessions(FakeSession(1, ["other"])), [dispatch("j@1")], 1000, answers)
    assert answers.got == [("j@1", False)] and len(probes) == 0


def test_started_under_the_new_token_takes_it_for_that_session() -> None:
    probes, answers = Probes(), Answers()
    a, b = FakeSession(1, ["h"]), FakeSession(2, ["h"])
    probes.send(sessions(a, b), [dispatch("j@1", token=9)], 1000, answers)
    tracked: list[tuple[int, str]] = []
    stale = worker_pb2.WorkerBatch()
    stale.started.add(execution_id="j@1", fencing_token=8)  # an older token: not an answer
    probes.answers(cast(Any, a), stale, lambda s, d: tracked.append((s.session_id, d.execution_id)))
    assert tracked == [] and answers.got == []
    batch = worker_pb2.WorkerBatch()
    batch.results.add(execution_id="j@1", fencing_token=9, from_ledger=True)
    probes.answers(cast(Any, b), batch, lambda s, d: tracked.append((s.session_id, d.execution_id)))
    assert tracked == [(2, "j@1")] and answers.got == [("j@1", True)] and len(probes) == 0
    assert probes.taken == 1


def test_absent_once_every_session_said_not_here_or_left() -> None:
    probes, answers = Probes(), Answers()
    a, b, c = FakeSession(1, ["h"]), FakeSession(2, ["h"]), FakeSession(3, ["h"])
    probes.send(sessions(a, b, c), [dispatch("j@1")], 1000, answers)
    probes.not_here(["j@1"], 1)
    probes.not_here(["j@1"], 1)  # the same session twice counts once
    probes.session_closed(3)
    assert answers.got == []
    probes.not_here(["j@1", "unknown@5"], 2)
    assert answers.got == [("j@1", False)] and probes.absent == 1


def test_deadline_hands_it_out_and_drop_forgets_without_answer() -> None:
    probes, answers = Probes(), Answers()
    a = FakeSession(1, ["h"])
    probes.send(sessions(a), [dispatch("j@1"), dispatch("j@2")], 1000, answers)
    probes.drop(["j@2"])
    probes.expire(999)
    assert answers.got == []
    probes.expire(1000)
    assert answers.got == [("j@1", False)] and len(probes) == 0


def test_an_answer_callback_that_raises_does_not_break_the_others() -> None:
    probes = Probes()
    got: list[str] = []

    def answer(eid: str, taken: bool) -> None:
        got.append(eid)
        raise RuntimeError("boom")

    probes.send(sessions(FakeSession(1, ["h"])), [dispatch("a@1"), dispatch("b@1")], 5, answer)
    probes.expire(5)
    assert sorted(got) == ["a@1", "b@1"]

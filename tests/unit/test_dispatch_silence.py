"""A worker that goes silent (frozen, its stream still open) gets nothing more, and what it
holds unstarted goes back for redelivery once the node's last promise to it has lapsed."""

from __future__ import annotations

from test_dispatch_lifecycle import LosingAuthority

from schedd import ManualClock
from schedd.dispatch import DispatchConfig, Dispatcher
from schedd.v1 import worker_pb2

T0 = 1_000_000


def _setup() -> tuple[Dispatcher, LosingAuthority, ManualClock, list]:  # type: ignore[type-arg]
    clock = ManualClock(T0)
    auth = LosingAuthority()
    d = Dispatcher("n", auth, config=DispatchConfig(heartbeat_interval_ms=1000), clock=clock)
    d.live_until_ms = lambda: clock.now_ms() + 1500
    sessions = []
    for w in ("frozen", "alive"):
        hello = worker_pb2.Hello(worker_id=w, queues=["q"], handlers=["h"], capacity=4, prefetch=4)
        sessions.append(d.open_session(hello))
    return d, auth, clock, sessions


def _held(eid: str, at: int) -> worker_pb2.Dispatch:
    return worker_pb2.Dispatch(
        execution_id=eid, fencing_token=5, queue="q", handler="h", start_at_ms=at
    )


async def test_silent_worker_gets_nothing_and_its_unstarted_holds_come_back() -> None:
    d, auth, clock, (frozen, alive) = _setup()
    frozen.hold_credits = 2
    assert d.hold([_held("j@1", T0 + 1000), _held("j@2", T0 + 1200)]) == []
    assert frozen.in_flight == {"j@1", "j@2"}
    # the worker starts j@1 and then freezes
    batch = worker_pb2.WorkerBatch()
    batch.started.add(execution_id="j@1", fencing_token=5, started_ms=T0 + 1000)
    await d.handle_batch(frozen, batch)
    frozen.flush()
    assert frozen.take() is not None
    promised = frozen.promised_ms
    assert promised >= T0 + 1500
    clock.advance(2_000)  # alive keeps talking; frozen says nothing past silent_after_ms
    await d.handle_batch(alive, worker_pb2.WorkerBatch())
    clock.advance(501)
    await d.handle_batch(alive, worker_pb2.WorkerBatch())
    await d._watch_silence(clock.now_ms())
    assert frozen.silent and not alive.silent
    # the last promise to it has lapsed: the unstarted hold goes back, the started one stays
    assert clock.now_ms() > promised
    assert auth.lost == [("j@2", "held by a silent worker")]
    assert "j@1" in d.in_flight() and "j@2" not in d.in_flight()
    # nothing more for it: not a hold, not a dispatch, not a probe, not a promise
    frozen.credits = frozen.hold_credits = 3
    alive.hold_credits = 1
    assert d.hold([_held("j@3", clock.now_ms() + 500)]) == []
    assert d.in_flight()["j@3"].worker_id == "alive"
    answers: list[tuple[str, bool]] = []
    d.probe([_held("j@9", 0)], lambda e, t: answers.append((e, t)))
    assert "j@9" in d.probes
    d.probes.not_here(["j@9"], alive.session_id)  # only alive was asked
    assert answers == [("j@9", False)]
    before = frozen.promised_ms
    frozen.flush()  # its cancel of j@2 goes out without a promise
    msg = frozen.take()
    assert msg is not None and [c.execution_id for c in msg.batch.cancels] == ["j@2"]
    assert msg.batch.live_until_ms == 0 and frozen.promised_ms == before


async def test_a_silent_worker_that_speaks_again_is_served_again() -> None:
    d, _, clock, (frozen, _alive) = _setup()
    clock.advance(2_501)
    await d._watch_silence(clock.now_ms())
    assert frozen.silent
    await d.handle_batch(frozen, worker_pb2.WorkerBatch())
    assert not frozen.silent and frozen.last_heard_ms == clock.now_ms()

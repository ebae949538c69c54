"""The dispatcher's lifecycle: supervised background loops, graceful and abrupt stops."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

import pytest
from test_dispatch_settle import Authority, _dispatch, _result

from schedd import ManualClock
from schedd.dispatch import REASON_LEASE_EXPIRED, DispatchConfig, Dispatcher, InFlight
from schedd.v1 import worker_pb2


class LosingAuthority(Authority):
    def __init__(self) -> None:
        super().__init__()
        self.lost: list[tuple[str, str]] = []

    async def on_lost(self, lost: list[InFlight], reason: str) -> None:
        self.lost.extend((f.dispatch.execution_id, reason) for f in lost)


async def _until(cond: Callable[[], bool], what: str) -> None:
    """Let the loop run (no time passes on a ManualClock) until ``cond`` holds."""
    for _ in range(200):
        if cond():
            return
        await asyncio.sleep(0)
    raise AssertionError(f"never happened: {what}")


def _started(config: DispatchConfig, clock: Any = None) -> tuple[Dispatcher, LosingAuthority, Any]:
    auth = LosingAuthority()
    d = Dispatcher("n", auth, config=config, clock=clock)
    hello = worker_pb2.Hello(worker_id="w", queues=["q"], handlers=["h"], capacity=4)
    return d, auth, d.open_session(hello)


def _failures(caplog: pytest.LogCaptureFixture, name: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if f"{name} crashed" in r.getMessage() and r.exc_info]


async def test_a_settler_that_fails_is_logged_and_restarted_and_settles_on(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    d, auth, session = _started(DispatchConfig(settle_defer_ms=0, restart_delay_ms=0))
    await d.start()
    sent: list[list[str]] = []
    real_send_acks = session.send_acks

    def send_acks_failing_once(acks: list[worker_pb2.ResultAck]) -> None:
        if not sent:
            sent.append([])
            raise RuntimeError("injected into the settle round")
        sent.append([a.execution_id for a in acks])
        real_send_acks(acks)

    monkeypatch.setattr(session, "send_acks", send_acks_failing_once)
    try:
        await d.handle_batch(session, _result("a"))
        await _until(lambda: bool(_failures(caplog, "schedd-settler")), "failure logged")
        assert d.restarts == 1
        await d.handle_batch(session, _result("b"))
        await _until(lambda: ["b"] in sent, "b acked after the restart")
        assert auth.calls == [["a"], ["b"]]
        assert "injected into the settle round" in caplog.text  # with its traceback
    finally:
        await d.stop()


async def test_a_reaper_that_fails_is_logged_and_restarted_and_reaps_on(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = ManualClock(1_000_000)
    config = DispatchConfig(lease_timeout_ms=100, reap_interval_ms=250, restart_delay_ms=100)
    d, auth, session = _started(config, clock)
    await d.start()
    real_reap = d.reap_expired
    calls: list[int] = []

    async def reap_failing_once() -> list[InFlight]:
        calls.append(clock.now_ms())
        if len(calls) == 1:
            raise RuntimeError("injected into the reaper")
        return await real_reap()

    monkeypatch.setattr(d, "reap_expired", reap_failing_once)
    try:
        await d.handle_batch(session, worker_pb2.WorkerBatch(credits=1))
        d.submit([_dispatch("x")])
        await _until(lambda: "x" in d.in_flight(), "x in flight")
        clock.advance(0.25)  # the lease ran out; the first reap fails
        await _until(lambda: bool(_failures(caplog, "schedd-dispatch-reaper")), "failure logged")
        assert auth.lost == [] and "x" in d.in_flight()
        clock.advance(0.1)  # restart delay
        await asyncio.sleep(0)
        clock.advance(0.25)  # the restarted loop's first interval
        await _until(lambda: auth.lost == [("x", REASON_LEASE_EXPIRED)], "x reported lost")
        assert d.restarts == 1 and len(calls) == 2
    finally:
        await d.stop()


async def test_a_graceful_stop_settles_what_a_backlog_deferred_without_waiting_for_time() -> None:
    clock = ManualClock(1_000_000)
    d, auth, session = _started(DispatchConfig(settle_defer_ms=60_000), clock)
    await d.start()
    d.submit([_dispatch("x")])  # waits for this worker's credits: a servable backlog
    await d.handle_batch(session, _result("a"))
    for _ in range(5):
        await asyncio.sleep(0)
    assert auth.calls == []  # deferred behind the backlog
    await asyncio.wait_for(d.stop(), 5)  # the ManualClock never moves: stop cuts the wait short
    assert auth.calls == [["a"]]
    assert d.stats.results_answered == 1


async def test_an_abrupt_stop_settles_nothing_more() -> None:
    clock = ManualClock(1_000_000)
    d, auth, session = _started(DispatchConfig(settle_defer_ms=60_000), clock)
    await d.start()
    d.submit([_dispatch("x")])
    await d.handle_batch(session, _result("a"))
    await asyncio.sleep(0)
    await asyncio.wait_for(d.stop(graceful=False), 5)
    assert auth.calls == []
    assert d.stats.results_answered == 0
    await d.stop()  # idempotent
    assert d.restarts == 0

"""The node's side of holding: which fires go ahead of their instant, and what a refusal does."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from schedd._clock import ManualClock
from schedd.node._config import NodeConfig
from schedd.node._firing import Firer
from schedd.node._live import Live
from schedd.v1 import execution_pb2, job_pb2, worker_pb2

DUE = 1_000_000


class _Dispatcher:
    """Holds what it has credits for; refuses the rest."""

    def __init__(self, hold_credits: int) -> None:
        self.hold_credits = hold_credits
        self.held: list[worker_pb2.Dispatch] = []
        self.submitted: list[worker_pb2.Dispatch] = []

    def hold(self, dispatches: list[worker_pb2.Dispatch]) -> list[worker_pb2.Dispatch]:
        take = list(dispatches[: self.hold_credits])
        self.hold_credits -= len(take)
        self.held.extend(_copy(d) for d in take)
        return list(dispatches[len(take) :])

    def submit(self, dispatches: list[worker_pb2.Dispatch]) -> None:
        self.submitted.extend(_copy(d) for d in dispatches)


def _copy(d: worker_pb2.Dispatch) -> worker_pb2.Dispatch:
    out = worker_pb2.Dispatch()
    out.CopyFrom(d)
    return out


class _Partition(SimpleNamespace):
    """The parts of a :class:`~schedd.node._partition.Partition` firing uses."""

    def __init__(self, job: job_pb2.Job) -> None:
        super().__init__(partition=1, live={}, jobs={"j": SimpleNamespace(job=job)})
        self.armed: list[tuple[int, str]] = []

    def arm_at(self, live: Live, fire_ms: int) -> None:
        self.armed.append((fire_ms, live.ex.id))


def _setup(
    overlap: int = job_pb2.OVERLAP_ALLOW, hold_ms: int = 2000, credits: int = 10
) -> tuple[Firer, Any, _Dispatcher, ManualClock]:
    cfg = NodeConfig(node_id="t", data_dir=Path("/nonexistent"), hold_ms=hold_ms)
    clock = ManualClock(DUE - 1500)
    m = Firer(cfg, clock, history=None)  # type: ignore[arg-type]
    d = _Dispatcher(credits)
    m.dispatcher = d  # type: ignore[assignment]
    job = job_pb2.Job(id="j", overlap=overlap, timeout_ms=30_000)  # type: ignore[arg-type]
    runner = _Partition(job)
    return m, runner, d, clock


def _live(runner: Any, n: int) -> Live:
    ex = execution_pb2.Execution(
        id=f"j@{n}", job_id="j", fencing_token=7 + n, due_ms=DUE, scheduled_ms=DUE
    )
    live = Live(ex)
    runner.live[ex.id] = live
    return live


async def test_an_allow_job_fires_hold_ms_ahead_and_other_policies_at_the_instant() -> None:
    for overlap, expected in (
        (job_pb2.OVERLAP_ALLOW, DUE - 2000),
        (job_pb2.OVERLAP_FORBID, DUE),
        (job_pb2.OVERLAP_BUFFER_ONE, DUE),
        (job_pb2.OVERLAP_REPLACE, DUE),
    ):
        m, runner, _, _ = _setup(overlap)
        live = _live(runner, 0)
        assert m.prepare(runner, live) == expected, overlap
        assert live.message is not None and live.message.start_at_ms == 0
        # the deadline counts from the instant, not from the early send
        assert live.message.deadline_ms == DUE + 30_000
    m, runner, _, _ = _setup(hold_ms=0)
    assert m.prepare(runner, _live(runner, 0)) == DUE  # holding switched off


async def test_early_fires_go_to_holding_workers_and_the_refused_are_armed_for_the_instant() -> (
    None
):
    m, runner, d, _ = _setup(credits=2)
    lives = [_live(runner, i) for i in range(3)]
    for lv in lives:
        m.prepare(runner, lv)
    await m.fire(runner, lives)
    assert [x.execution_id for x in d.held] == ["j@0", "j@1"]
    assert {x.start_at_ms for x in d.held} == {DUE}
    assert d.submitted == []
    assert [lv.dispatched for lv in lives] == [True, True, False]
    assert lives[0].ex.state == execution_pb2.EXECUTION_DISPATCHED
    refused = lives[2]
    assert refused.hold_refused and runner.armed == [(DUE, "j@2")]
    assert refused.message is not None and refused.message.start_at_ms == 0
    assert m.running.ids("j") and set(m.running.ids("j")) == {"j@0", "j@1"}
    # its instant: it goes out through submit, due now, with no start_at
    await m.fire(runner, [refused])
    assert [(x.execution_id, x.start_at_ms) for x in d.submitted] == [("j@2", 0)]
    assert refused.dispatched


async def test_a_redelivery_before_the_instant_is_held_again() -> None:
    m, runner, d, clock = _setup(credits=5)
    live = _live(runner, 0)
    live.message = None  # rebuilt, as for a new token
    m.dispatch(runner, [live], clock.now_ms())
    assert [(x.execution_id, x.start_at_ms, x.deadline_ms) for x in d.held] == [
        ("j@0", DUE, DUE + 30_000)
    ]
    clock.set_ms(DUE + 5)  # past the instant: sent due now
    other = _live(runner, 1)
    m.dispatch(runner, [other], clock.now_ms())
    assert [(x.execution_id, x.start_at_ms) for x in d.submitted] == [("j@1", 0)]


_ = asyncio

"""The node's side of holding: which fires go ahead of their instant, and what a refusal does."""

from __future__ import annotations

from types import SimpleNamespace

from unit.partition_kit import Outbox, config, own

from schedd._clock import ManualClock
from schedd.node._live import Live
from schedd.node._partition import Partition
from schedd.store import MemoryKV
from schedd.v1 import execution_pb2, job_pb2

DUE = 1_000_000


class _Partition(Partition):
    """The real partition, its timers' arming recorded."""

    armed: list[tuple[int, str]]

    def arm_at(self, live: Live, fire_ms: int) -> None:
        self.armed.append((fire_ms, live.ex.id))
        super().arm_at(live, fire_ms)


async def _setup(
    overlap: int = job_pb2.OVERLAP_ALLOW, hold_ms: int = 2000, credits: int = 10
) -> tuple[_Partition, Outbox, ManualClock]:
    clock = ManualClock(DUE - 1500)
    cfg = config(hold_ms=hold_ms)
    out = Outbox(hold_credits=credits)
    part = await own(MemoryKV(clock=clock), clock, None, cfg, outbound=out, cls=_Partition)
    assert isinstance(part, _Partition)
    part.armed = []
    job = job_pb2.Job(id="j", overlap=overlap, timeout_ms=30_000)  # type: ignore[arg-type]
    part.jobs["j"] = SimpleNamespace(job=job)  # type: ignore[assignment]
    return part, out, clock


def _live(part: Partition, n: int) -> Live:
    ex = execution_pb2.Execution(
        id=f"j@{n}", job_id="j", fencing_token=7 + n, due_ms=DUE, scheduled_ms=DUE
    )
    lv = part.live[ex.id] = Live(ex)
    return lv


async def test_an_allow_job_fires_hold_ms_ahead_and_other_policies_at_the_instant() -> None:
    for overlap, expected in (
        (job_pb2.OVERLAP_ALLOW, DUE - 2000),
        (job_pb2.OVERLAP_FORBID, DUE),
        (job_pb2.OVERLAP_BUFFER_ONE, DUE),
        (job_pb2.OVERLAP_REPLACE, DUE),
    ):
        part, _, _ = await _setup(overlap)
        live = _live(part, 0)
        assert part.prepare(live) == expected, overlap
        assert live.message is not None and live.message.start_at_ms == 0
        # the deadline counts from the instant, not from the early send
        assert live.message.deadline_ms == DUE + 30_000
    part, _, _ = await _setup(hold_ms=0)
    assert part.prepare(_live(part, 0)) == DUE  # holding switched off


async def test_early_fires_go_to_holding_workers_and_the_refused_are_armed_for_the_instant() -> (
    None
):
    part, d, _ = await _setup(credits=2)
    lives = [_live(part, i) for i in range(3)]
    for lv in lives:
        part.prepare(lv)
    await part.fire(lives)
    assert [x.execution_id for x in d.held] == ["j@0", "j@1"]
    assert {x.start_at_ms for x in d.held} == {DUE}
    assert d.submitted == []
    assert [lv.dispatched for lv in lives] == [True, True, False]
    assert lives[0].ex.state == execution_pb2.EXECUTION_DISPATCHED
    refused = lives[2]
    assert refused.hold_refused and part.armed == [(DUE, "j@2")]
    assert refused.message is not None and refused.message.start_at_ms == 0
    assert part.running.ids("j") and set(part.running.ids("j")) == {"j@0", "j@1"}
    # its instant: it goes out through submit, due now, with no start_at
    await part.fire([refused])
    assert [(x.execution_id, x.start_at_ms) for x in d.submitted] == [("j@2", 0)]
    assert refused.dispatched


async def test_a_redelivery_before_the_instant_is_held_again() -> None:
    part, d, clock = await _setup(credits=5)
    live = _live(part, 0)
    live.message = None  # rebuilt, as for a new token
    part.send([live], clock.now_ms())
    assert [(x.execution_id, x.start_at_ms, x.deadline_ms) for x in d.held] == [
        ("j@0", DUE, DUE + 30_000)
    ]
    clock.set_ms(DUE + 5)  # past the instant: sent due now
    other = _live(part, 1)
    part.send([other], clock.now_ms())
    assert [(x.execution_id, x.start_at_ms) for x in d.submitted] == [("j@1", 0)]

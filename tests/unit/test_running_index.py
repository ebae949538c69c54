"""A partition's index of dispatched executions per job (overlap policies read it; pure)."""

from __future__ import annotations

from unit.partition_kit import config, own

from schedd._clock import ManualClock
from schedd.node._live import OwnedPartitions, RunningIndex
from schedd.node._settling import ResultRouter
from schedd.store import MemoryKV
from schedd.v1 import worker_pb2


def test_one_then_many_then_none() -> None:
    m = RunningIndex()
    assert m.ids("j") == []
    m.add("j", "j@1")
    m.add("j", "j@1")  # the same execution again (a redelivery) stays one
    assert m.ids("j") == ["j@1"]
    m.add("j", "j@2")
    m.add("j", "j@3")
    assert sorted(m.ids("j")) == ["j@1", "j@2", "j@3"]
    m.discard("j", "j@2")
    m.discard("j", "j@9")  # unknown: no change
    assert sorted(m.ids("j")) == ["j@1", "j@3"]
    m.discard("j", "j@1")
    assert m.ids("j") == ["j@3"]
    m.discard("j", "j@3")
    assert "j" not in m and m.ids("j") == []


def test_forgetting_another_execution_keeps_the_single_one() -> None:
    m = RunningIndex()
    m.add("j", "j@1")
    m.discard("j", "j@2")
    m.discard("other", "other@1")
    assert m.ids("j") == ["j@1"]


async def test_a_reported_result_ends_running_unless_the_worker_gave_it_back() -> None:
    clock = ManualClock(0)
    table = OwnedPartitions(1)
    part = await own(MemoryKV(clock=clock), clock, None, config())
    table.add(part)
    m = part.running
    m.add("j", "j@1")
    m.add("k", "k@1")
    m.add("l", "l@1")
    ResultRouter(table).on_reported(
        [
            worker_pb2.Result(execution_id="j@1", outcome=worker_pb2.OUTCOME_SUCCEEDED),
            worker_pb2.Result(execution_id="k@1", outcome=worker_pb2.OUTCOME_CANCELLED),
            worker_pb2.Result(execution_id="l@1", outcome=worker_pb2.OUTCOME_TIMED_OUT),
        ]
    )
    assert m.by_job == {"k": "k@1"}  # CANCELLED by a shutting-down worker: handed out again

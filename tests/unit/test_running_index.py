"""The node's index of dispatched executions per job (overlap policies read it; pure)."""

from __future__ import annotations

from pathlib import Path

from schedd._clock import ManualClock
from schedd.node._config import NodeConfig
from schedd.node._executions import ExecutionManager
from schedd.v1 import worker_pb2


def manager() -> ExecutionManager:
    cfg = NodeConfig(node_id="t", data_dir=Path("/nonexistent"))
    return ExecutionManager(cfg, ManualClock(0), history=None, on_partition_lost=lambda p, r: None)  # type: ignore[arg-type]


def test_one_then_many_then_none() -> None:
    m = manager()
    assert m.running_ids("j") == []
    m._mark_running("j", "j@1")
    m._mark_running("j", "j@1")  # the same execution again (a redelivery) stays one
    assert m.running_ids("j") == ["j@1"]
    m._mark_running("j", "j@2")
    m._mark_running("j", "j@3")
    assert sorted(m.running_ids("j")) == ["j@1", "j@2", "j@3"]
    m.not_running("j", "j@2")
    m.not_running("j", "j@9")  # unknown: no change
    assert sorted(m.running_ids("j")) == ["j@1", "j@3"]
    m.not_running("j", "j@1")
    assert m.running_ids("j") == ["j@3"]
    m.not_running("j", "j@3")
    assert "j" not in m.running and m.running_ids("j") == []


def test_forgetting_another_execution_keeps_the_single_one() -> None:
    m = manager()
    m._mark_running("j", "j@1")
    m.not_running("j", "j@2")
    m.not_running("other", "other@1")
    assert m.running_ids("j") == ["j@1"]


def test_a_reported_result_ends_running_unless_the_worker_gave_it_back() -> None:
    m = manager()
    m._mark_running("j", "j@1")
    m._mark_running("k", "k@1")
    m._mark_running("l", "l@1")
    m.on_reported(
        [
            worker_pb2.Result(execution_id="j@1", outcome=worker_pb2.OUTCOME_SUCCEEDED),
            worker_pb2.Result(execution_id="k@1", outcome=worker_pb2.OUTCOME_CANCELLED),
            worker_pb2.Result(execution_id="l@1", outcome=worker_pb2.OUTCOME_TIMED_OUT),
        ]
    )
    assert m.running == {"k": "k@1"}  # CANCELLED by a shutting-down worker: handed out again

"""The SDK names execution states: State(run.state) prints SUCCEEDED, not 4."""

from __future__ import annotations

from schedd.client import State
from schedd.model import state_name
from schedd.v1 import execution_pb2


def test_every_wire_state_has_its_name() -> None:
    for value in execution_pb2.ExecutionState.values():
        state = State(value)
        assert state == value
        assert str(state) == f"{state}" == (state_name(value) if value else "UNSPECIFIED")


def test_a_run_reads_by_name() -> None:
    run = execution_pb2.Execution(state=execution_pb2.EXECUTION_SUCCEEDED)
    assert run.state == State.SUCCEEDED
    assert f"{State(run.state):>10}" == " SUCCEEDED"
    assert [str(State(s)) for s in (2, 3, 7)] == ["DISPATCHED", "RUNNING", "DEAD"]

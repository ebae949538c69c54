"""Choosing an executor: what a dispatch no executor can run fails with, and when."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest

from schedd.v1 import job_pb2, worker_pb2
from schedd.worker._context import Context
from schedd.worker._execution import Execution, begin
from schedd.worker._executor import Outcome, Runtime, target_kind


def _target(kind: str) -> bytes:
    job = job_pb2.Job()
    if kind == "http":
        job.http.url = "https://x.test"
    else:
        job.shell.argv.append("true")
    return job.SerializeToString()


def _execution(d: worker_pb2.Dispatch) -> Execution:
    return Execution(Context(d, ledger=None), SimpleNamespace(), lambda ex, o: None)  # type: ignore[arg-type]


def test_target_kind() -> None:
    assert target_kind(b"") == ""
    assert target_kind(_target("http")) == "http"
    assert target_kind(_target("shell")) == "shell"
    with pytest.raises(ValueError, match="corrupt target"):
        target_kind(b"\xff\xff\xff")


@pytest.mark.parametrize(
    ("dispatch", "error"),
    [
        (worker_pb2.Dispatch(handler="nope"), "no handler named nope on this worker"),
        (
            worker_pb2.Dispatch(job_id="j", target=_target("shell")),
            "no executor for shell jobs on this worker (job j)",
        ),
        (
            worker_pb2.Dispatch(job_id="j", target=_target("http")),
            "no executor for http jobs on this worker (job j)",
        ),
        (worker_pb2.Dispatch(execution_id="e"), "execution e names no handler and has no target"),
    ],
)
def test_no_executor_fails_permanently_naming_the_handler_or_kind(
    dispatch: worker_pb2.Dispatch, error: str
) -> None:
    dispatch.deadline_ms = 1  # long past: still FAILED_PERMANENT, as before the seam
    runtime = Runtime(asyncio.new_event_loop(), None)  # type: ignore[arg-type]
    try:
        got = begin(None, _execution(dispatch), 1_000, runtime)
    finally:
        runtime.loop.close()
    assert got == Outcome(worker_pb2.OUTCOME_FAILED_PERMANENT, error=error)


def test_an_executor_gets_the_decoded_payload_and_the_context() -> None:
    seen: list[Any] = []

    class Recording:
        def begin(self, ctx: Context, payload: Any, runtime: Runtime) -> Outcome:
            seen.append((ctx.execution_id, payload))
            return Outcome(worker_pb2.OUTCOME_SUCCEEDED)

    d = worker_pb2.Dispatch(execution_id="e", payload=b'{"a": 1}')
    ex = _execution(d)
    runtime = Runtime(asyncio.new_event_loop(), None)  # type: ignore[arg-type]
    try:
        assert begin(Recording(), ex, 0, runtime).code == worker_pb2.OUTCOME_SUCCEEDED  # type: ignore[union-attr]
        d.deadline_ms = 5
        assert begin(Recording(), _execution(d), 5, runtime) == Outcome(
            worker_pb2.OUTCOME_TIMED_OUT, error="deadline passed before start"
        )
    finally:
        runtime.loop.close()
    assert seen == [("e", {"a": 1})] and ex.payload is None  # not kept by the attempt

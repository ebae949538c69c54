"""What a harness records: executions as :class:`Run`, attempts as :class:`Attempt`.

Finished executions reach :class:`RunLog` exactly where a node records its history (the real
``Partition`` calls ``History.record``); attempts are recorded by the in-process workers as
they run each one.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from schedd.history import History
from schedd.v1 import execution_pb2
from schedd.worker import decode_payload


def _at(ms: int) -> datetime | None:
    return datetime.fromtimestamp(ms / 1000, tz=UTC) if ms else None


def state_name(state: int) -> str:
    """``EXECUTION_SUCCEEDED`` -> ``"SUCCEEDED"``."""
    return execution_pb2.ExecutionState.Name(state).removeprefix("EXECUTION_")  # type: ignore[arg-type]


@dataclass(frozen=True, slots=True)
class Run:
    """One execution of a job (one per job and scheduled fire time), as the scheduler has it.

    Attributes:
        execution_id: ``"{job_id}@{scheduled_ms}"``, the idempotency key handlers get.
        job_id: the job's id.
        scheduled_ms: the fire time it is for (UTC ms).
        state: ``"SUCCEEDED"``, ``"DEAD"``, ``"MISSED"``, ``"SKIPPED"``, ``"CANCELLED"`` for a
            finished run; ``"PENDING"``, ``"DISPATCHED"``, ``"RUNNING"``, ``"RETRY_WAIT"`` for
            one still live.
        attempt: the attempt it ended with (1 for the first).
        trigger: ``"SCHEDULE"``, ``"CATCH_UP"`` (a late fire run by the misfire policy),
            ``"MANUAL"`` (trigger), ``"BACKFILL"`` or ``"REDRIVE"``.
        due_ms: when it was due (its scheduled time plus jitter, or later for a catch-up).
        started_ms: when its last attempt started (0: never, or it ended without suspending).
        finished_ms: when it ended (0: still live).
        error: the last attempt's error (``"ValueError: ..."``), if it failed.
        reason: why the scheduler ended it so (missed, skipped, dead, cancelled).
        fencing_token: the token of its last hand-out.
        output: what the last attempt returned, JSON-encoded (bytes kept as they are).
    """

    execution_id: str
    job_id: str
    scheduled_ms: int
    state: str
    attempt: int
    trigger: str
    due_ms: int
    started_ms: int
    finished_ms: int
    error: str
    reason: str
    fencing_token: int
    output: bytes

    @staticmethod
    def of(ex: execution_pb2.Execution) -> Run:
        """The view of one stored execution."""
        return Run(
            ex.id, ex.job_id, ex.scheduled_ms, state_name(ex.state), ex.attempt,
            execution_pb2.Trigger.Name(ex.trigger).removeprefix("TRIGGER_"), ex.due_ms,
            ex.started_ms, ex.finished_ms, ex.error, ex.reason, ex.fencing_token, ex.result,
        )  # fmt: skip

    @property
    def scheduled_at(self) -> datetime:
        """The fire time as an aware UTC datetime (compares equal to the same instant in any
        zone)."""
        return datetime.fromtimestamp(self.scheduled_ms / 1000, tz=UTC)

    @property
    def started_at(self) -> datetime | None:
        return _at(self.started_ms)

    @property
    def finished_at(self) -> datetime | None:
        return _at(self.finished_ms)

    @property
    def result(self) -> Any:
        """The output decoded as a handler's payload is (JSON, else bytes; None if empty)."""
        return decode_payload(self.output)


@dataclass(frozen=True, slots=True)
class Attempt:
    """One attempt a harness worker ran (retries, redeliveries and redrives each make one).

    Attributes:
        execution_id: the execution it was an attempt of.
        attempt: its number (1 for the first).
        fencing_token: the token it was handed out under.
        started_ms: when the worker started it (virtual time, UTC ms).
        finished_ms: when it ended.
        outcome: ``"SUCCEEDED"``, ``"FAILED"``, ``"FAILED_PERMANENT"``, ``"TIMED_OUT"`` or
            ``"CANCELLED"``.
        error: the error text reported (``"RuntimeError: boom"``).
    """

    execution_id: str
    attempt: int
    fencing_token: int
    started_ms: int
    finished_ms: int
    outcome: str
    error: str

    @property
    def job_id(self) -> str:
        return self.execution_id.rpartition("@")[0]

    @property
    def started_at(self) -> datetime:
        return datetime.fromtimestamp(self.started_ms / 1000, tz=UTC)


class RunLog(History):
    """The node's history, in memory: the last record of each finished execution.

    A node records finished executions in a RocksDB :class:`~schedd.history.History`; the
    harness's roles record into this instead (only :meth:`record` and :meth:`get` are used
    on the paths it runs). Nothing is pruned: a simulation keeps every run it made.
    """

    def __init__(self) -> None:  # no RocksDB: the base class's store is never opened
        self.runs: dict[str, Run] = {}
        self.ttl_ms = 0

    def record(self, executions: Iterable[execution_pb2.Execution]) -> None:
        runs = self.runs
        for ex in executions:
            runs[ex.id] = Run.of(ex)

    def get(self, execution_id: str) -> execution_pb2.Execution | None:
        raise NotImplementedError("the harness reads runs from RunLog.runs")

    def close(self) -> None:
        pass

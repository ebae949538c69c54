"""The one order executions are listed in, cluster-wide: newest scheduled time first, then
execution id ascending (a stable tie-break, so a keyset cursor names one exact position).

Every part that lists (a node's history, its live executions, the merge of the nodes'
answers) sorts with :func:`list_order` and resumes after a :class:`Position` with
:func:`comes_after`, so pages cut anywhere join up without gaps or repeats::

    rows.sort(key=list_order)
    page = [e for e in rows if comes_after(e, cursor)][:size]
    cursor = Position.of(page[-1])
"""

from __future__ import annotations

from dataclasses import dataclass

from schedd.v1 import execution_pb2


@dataclass(frozen=True, order=True)
class Position:
    """Where a listing stopped: the last execution returned, by its sort key."""

    scheduled_ms: int
    execution_id: str

    @classmethod
    def of(cls, ex: execution_pb2.Execution) -> Position:
        return cls(ex.scheduled_ms, ex.id)


def list_order(ex: execution_pb2.Execution) -> tuple[int, str]:
    """Sort key: scheduled time descending, then id ascending."""
    return (-ex.scheduled_ms, ex.id)


def comes_after(ex: execution_pb2.Execution, cursor: Position | None) -> bool:
    """Whether ``ex`` is listed after ``cursor`` (everything is, without a cursor)."""
    if cursor is None:
        return True
    if ex.scheduled_ms != cursor.scheduled_ms:
        return ex.scheduled_ms < cursor.scheduled_ms
    return ex.id > cursor.execution_id

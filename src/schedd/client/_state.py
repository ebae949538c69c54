"""Execution states by name, for SDK users: ``State(run.state)`` prints ``SUCCEEDED``.

Executions are protobuf messages whose ``state`` is a number; :class:`State` is the same
numbers as an ``IntEnum`` (``run.state == State.SUCCEEDED`` holds), printed by name.
"""

from __future__ import annotations

import enum

from schedd.v1 import execution_pb2


class State(enum.IntEnum):
    """An execution's state; ``str()`` and f-strings give its name."""

    UNSPECIFIED = execution_pb2.EXECUTION_STATE_UNSPECIFIED
    PENDING = execution_pb2.EXECUTION_PENDING
    DISPATCHED = execution_pb2.EXECUTION_DISPATCHED
    RUNNING = execution_pb2.EXECUTION_RUNNING
    SUCCEEDED = execution_pb2.EXECUTION_SUCCEEDED
    FAILED = execution_pb2.EXECUTION_FAILED
    RETRY_WAIT = execution_pb2.EXECUTION_RETRY_WAIT
    DEAD = execution_pb2.EXECUTION_DEAD
    MISSED = execution_pb2.EXECUTION_MISSED
    SKIPPED = execution_pb2.EXECUTION_SKIPPED
    CANCELLED = execution_pb2.EXECUTION_CANCELLED

    def __str__(self) -> str:
        return self.name

    def __format__(self, spec: str) -> str:
        return format(self.name, spec)

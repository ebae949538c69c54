"""Stored values: due-index entries, per-job schedule state, and executions (made, encoded)."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from schedd.store._keys import Keys
from schedd.store.abc import Compare, KeyValueView, Op, OpBuilder
from schedd.v1 import execution_pb2, job_pb2

#: A due entry of kind FIRE is a schedule fire: claiming it creates the execution.
FIRE = "f"
#: A due entry of kind RUN points at an existing execution (retry, trigger, backfill, redrive):
#: claiming it re-tokens that execution.
RUN = "r"


@dataclass(frozen=True)
class DueEntry:
    """One key of the due index: ``due/{p}/{due_ms}/{job_id}`` (FIRE) or
    ``due/{p}/{due_ms}/{job_id}/{scheduled_ms}`` (RUN: it names its execution).

    ``legacy_key``: a RUN entry read from a key without the scheduled time (written by a
    node of key format 1); it is consumed or dropped at the key it was read from.
    """

    partition: int
    due_ms: int
    job_id: str
    kind: str
    scheduled_ms: int
    mod_revision: int = 0
    legacy_key: bool = False

    @property
    def names_execution(self) -> bool:
        """Whether the entry's key carries its scheduled time (every RUN entry written now)."""
        return self.kind != FIRE and not self.legacy_key

    def encode(self) -> bytes:
        return self.encode_value(self.kind, self.scheduled_ms)

    @staticmethod
    def encode_value(kind: str, scheduled_ms: int) -> bytes:
        """The stored value of a due entry: its kind and scheduled time, ``b"f1700000000000"``."""
        return b"%s%d" % (kind.encode(), scheduled_ms)

    @staticmethod
    def decode(
        partition: int,
        due_ms: int,
        job_id: str,
        value: bytes,
        mod_revision: int,
        key_scheduled_ms: int = 0,
    ) -> DueEntry:
        """The entry stored at a due key (``key_scheduled_ms``: the key's fourth part, 0 if
        none) with this value."""
        text = value.decode()
        kind = text[:1]
        legacy = kind != FIRE and not key_scheduled_ms
        return DueEntry(partition, due_ms, job_id, kind, int(text[1:] or 0), mod_revision, legacy)


@dataclass
class JobState:
    """The scheduler's cursor for one job, at ``state/{job}``.

    Attributes:
        due_ms: the due key of the next schedule fire (``0``: none, e.g. paused or finished).
        next_fire_ms: that fire's scheduled time (before jitter).
        last_fire_ms: the last scheduled fire that was claimed (the iteration cursor).
    """

    due_ms: int = 0
    next_fire_ms: int = 0
    last_fire_ms: int = 0

    def encode(self) -> bytes:
        # The JSON array ``[due, next, last]``, exactly as ``json.dumps`` writes it, without
        # the encoder's cost (a claim writes one per job).
        return b"[%d, %d, %d]" % (self.due_ms, self.next_fire_ms, self.last_fire_ms)

    @staticmethod
    def decode(value: bytes) -> JobState:
        if not value:
            return JobState()
        due, nxt, last = json.loads(value)
        return JobState(int(due), int(nxt), int(last))


@dataclass(frozen=True)
class StoredJob:
    """A job spec and its cursor as read, with the revisions guarded writes compare on."""

    job: job_pb2.Job
    spec_revision: int
    state: JobState
    state_revision: int

    @staticmethod
    def from_kvs(
        spec: Sequence[KeyValueView],
        state: Sequence[KeyValueView],
        read_job: Callable[[bytes], job_pb2.Job] = job_pb2.Job.FromString,
    ) -> StoredJob | None:
        """From the range results of ``jobs/{id}`` and ``state/{id}``; None when no spec.

        ``read_job`` decodes the spec (a :class:`~._sealing.Sealer`'s, which opens secrets).
        """
        if not spec:
            return None
        if state:
            return StoredJob(
                read_job(spec[0].value),
                spec[0].mod_revision,
                JobState.decode(state[0].value),
                state[0].mod_revision,
            )
        return StoredJob(read_job(spec[0].value), spec[0].mod_revision, JobState(), 0)


def encode_execution(execution: execution_pb2.Execution) -> bytes:
    # The token is the key's mod_revision, known only after the write: never stored.
    token = execution.fencing_token
    if not token:
        return execution.SerializeToString()
    execution.fencing_token = 0
    try:
        return execution.SerializeToString()
    finally:
        execution.fencing_token = token


def decode_execution(value: bytes, mod_revision: int) -> execution_pb2.Execution:
    execution = execution_pb2.Execution.FromString(value)
    execution.fencing_token = mod_revision
    return execution


@dataclass(frozen=True)
class NewRun:
    """A new execution's run key and its RUN due entry (at ``due_ms``, naming it), as one
    nested transaction's parts: compares that neither exists yet, and their puts. Made by
    :func:`new_run`; triggers, backfills, redrives and a dependent's start all write this."""

    run_key: bytes
    due_key: bytes
    compares: list[Compare]
    ops: list[Op]


def new_run(ops: OpBuilder, keys: Keys, ex: execution_pb2.Execution, value: bytes) -> NewRun:
    """The writes that create ``ex`` (stored as ``value``, sealed by the caller) with its
    durable timer at ``ex.due_ms`` in its partition's due index."""
    p, job_id, sched = ex.partition, ex.job_id, ex.scheduled_ms
    run_key = keys.run_key(p, job_id, sched)
    due_key = keys.run_due_key(p, ex.due_ms, job_id, sched)
    entry = DueEntry.encode_value(RUN, sched)
    return NewRun(
        run_key,
        due_key,
        [ops.cmp_create(run_key, 0), ops.cmp_create(due_key, 0)],
        [ops.put(run_key, value), ops.put(due_key, entry)],
    )

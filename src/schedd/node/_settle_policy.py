"""Settling policy: what a worker's result makes of the execution it reports on.

Pure decisions, written by nobody here: success ends the run; a failure with attempts left
becomes a retry, due at now + backoff with full jitter (or later, when the target said
``Retry-After``); the last failure, or a permanent one, a dead letter; an attempt a worker gave
back (it shut down) is handed out again, same attempt. The partition turns a
:class:`Settlement` into its fenced write and applies it once the write holds.
"""

from __future__ import annotations

import enum
import random
from dataclasses import dataclass

from schedd.schedule import retry_backoff_ms
from schedd.v1 import execution_pb2, job_pb2, worker_pb2

FAILED = (worker_pb2.OUTCOME_FAILED, worker_pb2.OUTCOME_TIMED_OUT)
#: Outcomes that end an attempt (a CANCELLED one a worker gave back is handed out again).
ENDED = frozenset({worker_pb2.OUTCOME_SUCCEEDED, worker_pb2.OUTCOME_FAILED_PERMANENT, *FAILED})
#: The most of a failed attempt's output kept with the execution (its run key while it waits
#: to be retried, its dead letter): a settle transaction of 128 items must stay well under
#: etcd's request limit (1.5 MiB). Longer output is dropped there; the error text stays.
FAILED_OUTPUT_KEPT = 8 * 1024


class Fate(enum.Enum):
    """What a result makes of its execution."""

    SUCCEEDED = "succeeded"  # the run ends
    CANCELLED = "cancelled"  # the run ends: the node had asked for it (overlap, API change)
    RETRY = "retry"  # a new attempt is due at ``retry_due_ms``
    DEAD = "dead"  # the run ends as a dead letter (``record``)
    REDELIVER = "redeliver"  # the same attempt goes out again under a new token


@dataclass(slots=True)
class Settlement:
    """One result's decision.

    Attributes:
        fate: what becomes of the execution.
        record: the execution as it is written, for RETRY, DEAD and REDELIVER (a copy: memory
            keeps the current attempt until the write holds); None for SUCCEEDED and
            CANCELLED, whose record is the live execution itself, finished once written.
        retry_due_ms: when the next attempt is due (RETRY).
    """

    fate: Fate
    record: execution_pb2.Execution | None = None
    retry_due_ms: int = 0


def settle(
    ex: execution_pb2.Execution,
    r: worker_pb2.Result,
    job: job_pb2.Job | None,
    now: int,
    *,
    cancelling: bool,
    rng: random.Random,
) -> Settlement:
    """What the result ``r`` of the current attempt of ``ex`` makes of it (``cancelling``: the
    node asked for it to be cancelled)."""
    if r.outcome == worker_pb2.OUTCOME_SUCCEEDED:
        return Settlement(Fate.SUCCEEDED)
    if r.outcome == worker_pb2.OUTCOME_CANCELLED and cancelling:
        return Settlement(Fate.CANCELLED)
    rec = copy_execution(ex)
    finish(rec, r, now)
    if r.outcome == worker_pb2.OUTCOME_CANCELLED:
        # The worker shut down before finishing it: hand it out again, same attempt.
        rec.state = execution_pb2.EXECUTION_PENDING
        rec.worker_id = ""
        return Settlement(Fate.REDELIVER, rec)
    max_attempts = rec.max_attempts or 3
    if r.outcome in FAILED and rec.attempt < max_attempts:
        due = now + retry_delay_ms(rec.attempt, r, job, rng)
        rec.state = execution_pb2.EXECUTION_RETRY_WAIT
        rec.attempt += 1
        rec.due_ms = due
        rec.worker_id = ""
        return Settlement(Fate.RETRY, rec, retry_due_ms=due)
    rec.state = execution_pb2.EXECUTION_DEAD
    rec.reason = f"attempt {rec.attempt} of {max_attempts} failed"
    return Settlement(Fate.DEAD, rec)


def retry_delay_ms(
    attempt: int, r: worker_pb2.Result, job: job_pb2.Job | None, rng: random.Random
) -> int:
    """The backoff before the attempt after ``attempt`` (full jitter); a target's own
    ``Retry-After`` when longer, within the job's max backoff. At least 1 ms."""
    retry = job.retry if job is not None else job_pb2.RetryPolicy()
    max_ms = retry.max_backoff_ms or 300_000
    delay = retry_backoff_ms(
        attempt,
        initial_ms=retry.initial_backoff_ms or 1000,
        max_ms=max_ms,
        multiplier=retry.multiplier or 2.0,
        rng=rng,
    )
    if r.retry_after_ms > delay:  # the target's own word (Retry-After), within max backoff
        delay = min(r.retry_after_ms, max(delay, max_ms))
    return max(1, delay)


def finish(ex: execution_pb2.Execution, r: worker_pb2.Result, now: int) -> None:
    """What every ended or redelivered attempt takes from the worker's result."""
    ex.finished_ms = r.finished_ms or now
    ex.started_ms = r.started_ms or ex.started_ms
    ex.error = r.error
    # A failed attempt's output too (an HTTP answer, a shell's stderr); never an older one's.
    ex.result = r.output if len(r.output) <= FAILED_OUTPUT_KEPT else b""


def copy_execution(ex: execution_pb2.Execution) -> execution_pb2.Execution:
    out = execution_pb2.Execution()
    out.CopyFrom(ex)
    return out


def first_line(text: str, limit: int = 200) -> str:
    """The start of an error text, for a one-line log message."""
    line = text.strip().split("\n", 1)[0]
    return line if len(line) <= limit else line[: limit - 3] + "..."

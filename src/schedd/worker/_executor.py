"""The executor contract: how an attempt of each kind of job (handler, http, shell) is run.

The worker does the bookkeeping every attempt shares (its slot, the ledger, Started, the
Result, heartbeats, the deadline, cancellation) and hands the attempt's work to the
:class:`Executor` chosen by the dispatch:

* a dispatch with a ``handler`` name runs on the executor registered under that name
  (``Worker.add_handler`` wraps the function in a
  :class:`~schedd.worker._handler.HandlerExecutor`): one dict lookup, as before the seam;
* a dispatch with an empty ``handler`` and a ``target`` (a serialized ``schedd.v1.Job`` with
  only its ``http`` or ``shell`` oneof set) runs on the executor added for that kind
  (``Worker.add_executor("http", ...)``);
* none found: the attempt fails permanently (FAILED_PERMANENT, no retry) with an error that
  names the handler or the kind, without calling anything.

Worked example: an executor that answers every shell job at once::

    class Refuse:
        def begin(self, ctx: Context, payload: Any, runtime: Runtime) -> Outcome:
            return Outcome(worker_pb2.OUTCOME_FAILED_PERMANENT, error="shell is off")

    worker.add_executor("shell", Refuse())
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any, Final, Protocol

from schedd._limits import GRPC_MAX_MESSAGE_BYTES
from schedd.v1 import job_pb2, worker_pb2
from schedd.worker._context import Context, PermanentError, encode_value
from schedd.worker._threads import ThreadBridge

#: The kinds of job target an executor may be added for (a ``schedd.v1.Job`` oneof name).
EXECUTOR_KINDS: Final = ("http", "shell")
log = logging.getLogger("schedd.worker._worker")
#: The most output and error text one result carries: it must fit a message on the stream
#: (16 MiB, schedd._limits) with room to spare. A larger output is dropped, the outcome kept:
#: sent, it would fail the stream at every reconnect.
MAX_RESULT_OUTPUT_BYTES = GRPC_MAX_MESSAGE_BYTES // 2


@dataclass(slots=True)
class Outcome:
    """How an attempt ended: a ``worker_pb2.Outcome`` code, its output and error text.

    ``retry_after_ms`` (failed attempts): retry no sooner than this (``Result.retry_after_ms``).
    """

    code: int
    output: bytes = b""
    error: str = ""
    retry_after_ms: int = 0


@dataclass(frozen=True, slots=True)
class Runtime:
    """What executors may use while the worker runs (made once per run, not per attempt)."""

    loop: asyncio.AbstractEventLoop
    #: Runs blocking calls on the worker's thread pool (the way sync handlers run).
    threads: ThreadBridge


class Executor(Protocol):
    """Runs attempts of one kind of job.

    Contract:
        * :meth:`begin` is called on the worker's event loop, once per attempt, after the
          worker checked that the deadline has not passed; ``payload`` is the dispatch's
          payload JSON-decoded (raw bytes if it is not JSON, None if empty); the dispatch
          itself (ids, token, attempt, ``target``) is readable through ``ctx``.
        * It returns the attempt's :class:`Outcome` when it is decided without waiting (the
          worker then sends no Started), else a future still running the work.
        * The future's result is settled like a handler's return: a value is SUCCEEDED with
          its JSON encoding (bytes as they are) as output, :class:`PermanentError` is
          FAILED_PERMANENT, any other exception FAILED, a cancelled future CANCELLED; an
          :class:`Outcome` as the result is taken as it is (an executor that decides the
          code, the output and a retry hint itself).
        * Cancellation and timeout reach the work through the future and ``ctx``: on a Cancel
          from the node, a newer attempt, a shutdown or the deadline the worker calls
          ``future.cancel()`` (``ctx.cancelled`` and ``ctx.wait_cancelled()`` say so too) and
          reports CANCELLED or TIMED_OUT; the work gets a few seconds to unwind, after which
          the outcome is reported whatever the future does.
        * It must not block the loop (use ``runtime.threads`` or asyncio I/O) and must not
          raise: a failure to start is an Outcome.
    """

    def begin(
        self, ctx: Context, payload: Any, runtime: Runtime
    ) -> Outcome | asyncio.Future[Any]: ...


def error_text(e: BaseException) -> str:
    return f"{type(e).__name__}: {e}"


def succeeded(value: Any) -> Outcome:
    """SUCCEEDED with ``value`` encoded, or FAILED when it cannot be."""
    try:
        return Outcome(worker_pb2.OUTCOME_SUCCEEDED, output=encode_value(value))
    except (TypeError, ValueError) as e:
        return Outcome(worker_pb2.OUTCOME_FAILED, error=f"output is not JSON-encodable: {e}")


def settle(task: asyncio.Future[Any]) -> Outcome:
    """The outcome of a finished future an executor returned (the rules of :class:`Executor`)."""
    if task.cancelled():
        return Outcome(worker_pb2.OUTCOME_CANCELLED, error="handler was cancelled")
    exc = task.exception()
    if isinstance(exc, PermanentError):
        return Outcome(worker_pb2.OUTCOME_FAILED_PERMANENT, error=error_text(exc))
    if exc is not None:
        return Outcome(worker_pb2.OUTCOME_FAILED, error=error_text(exc))
    value = task.result()
    if isinstance(value, Outcome):
        return value
    return succeeded(value)


def target_kind(target: bytes) -> str:
    """The kind of a dispatch's serialized target (``http``, ``shell``, ...; ``""`` if none).

    Raises:
        ValueError: ``target`` is not a serialized ``schedd.v1.Job``.
    """
    if not target:
        return ""
    job = job_pb2.Job()
    try:
        job.ParseFromString(target)
    except Exception as e:  # protobuf's DecodeError, whose module path varies by backend
        raise ValueError(f"corrupt target ({len(target)} bytes): {e}") from e
    return job.WhichOneof("target") or ""


def no_executor_error(d: worker_pb2.Dispatch) -> str:
    """Why no executor runs ``d``: the handler name, or the kind of its target."""
    if d.handler:
        return f"no handler named {d.handler} on this worker"
    try:
        kind = target_kind(d.target)
    except ValueError as e:
        return f"cannot run execution {d.execution_id}: {e}"
    if not kind:
        return f"execution {d.execution_id} names no handler and has no target"
    return f"no executor for {kind} jobs on this worker (job {d.job_id})"


def fit_result(execution_id: str, output: bytes, error: str) -> tuple[bytes, str]:
    """``output`` and ``error`` as a result carries them: unchanged when together at most
    :data:`MAX_RESULT_OUTPUT_BYTES`; else the output dropped (and the error cut to fit),
    saying so in the error."""
    most = MAX_RESULT_OUTPUT_BYTES
    if len(output) + len(error) <= most:
        return output, error
    note = f"output of {len(output)} bytes dropped: a result carries at most {most}"
    log.warning("execution %s: %s", execution_id, note, extra={"execution": execution_id})
    return b"", f"{error[: most - len(note) - 2]}; {note}" if error else note

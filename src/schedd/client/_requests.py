"""Request building shared by :class:`Client` and :class:`AsyncClient`: pure, no I/O."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from schedd._errors import InvalidArgument
from schedd.client._convert import encode_payload, to_duration_ms
from schedd.model import parse_misfire, parse_overlap, parse_state
from schedd.v1 import execution_pb2, job_pb2, scheduler_pb2


class _Unset:
    """Marks a keyword argument the caller did not give (``None`` may be meaningful)."""

    def __repr__(self) -> str:
        return "UNSET"


#: Default of :meth:`Client.update_job`'s ``payload``: leave the payload as it is.
UNSET: Any = _Unset()


@dataclass(frozen=True)
class CreateJobResult:
    """What CreateJob returned: the stored job, False when it already existed, and warnings
    that did not stop the create (no connected worker serves its handler, say)."""

    job: job_pb2.Job
    created: bool
    warnings: tuple[str, ...] = ()


class ExecutionList(list[execution_pb2.Execution]):
    """The executions of a cluster-wide listing, and ``missing_nodes``: the nodes that did
    not answer (down or too slow), whose part may be missing from the list (empty when every
    node answered)."""

    def __init__(
        self,
        items: Iterable[execution_pb2.Execution] = (),
        missing_nodes: Iterable[scheduler_pb2.MissingNode] = (),
    ) -> None:
        super().__init__(items)
        self.missing_nodes: list[scheduler_pb2.MissingNode] = list(missing_nodes)


@dataclass(frozen=True)
class BackfillResult:
    """The executions a backfill created (with ``dry_run``: would create), how many fires
    ``limit`` left out and where the next call can start (``next_start_ms``, 0 when none were
    left out), and the fires it found with an execution already (``existing_ms``)."""

    executions: list[execution_pb2.Execution] = field(default_factory=list)
    truncated: int = 0
    existing_ms: list[int] = field(default_factory=list)
    next_start_ms: int = 0


def _set_target(
    job: job_pb2.Job,
    handler: str | None,
    queue: str | None,
    http: str | job_pb2.HttpTarget | None,
    shell: Sequence[str] | job_pb2.ShellTarget | None,
) -> None:
    given = [t for t in (handler, http, shell) if t is not None]
    if len(given) > 1:
        raise InvalidArgument("target", "give only one of handler, http or shell")
    if handler is not None:
        job.handler.name = handler
        job.handler.queue = queue or ""
    elif isinstance(http, job_pb2.HttpTarget):
        job.http.CopyFrom(http)
    elif http is not None:
        job.http.url = http
    elif isinstance(shell, job_pb2.ShellTarget):
        job.shell.CopyFrom(shell)
    elif shell is not None:
        if isinstance(shell, str):
            raise InvalidArgument("shell", "give argv as a list of strings")
        job.shell.argv.extend(shell)


def _set_when(job: job_pb2.Job, schedule: str, tz: str, after: Sequence[str]) -> None:
    """A new job's schedule, or its parents (``after``) instead."""
    if isinstance(after, str):
        raise InvalidArgument("after", "give parents as a list of job ids or names")
    if after and schedule:
        raise InvalidArgument("after", "a job with parents runs when they succeed: no schedule")
    job.after.extend(after)
    if not after:
        job.schedule.expr = schedule
        job.schedule.timezone = tz


def build_job(
    name: str,
    *,
    schedule: str = "",
    tz: str = "UTC",
    handler: str | None = None,
    queue: str = "default",
    http: str | job_pb2.HttpTarget | None = None,
    shell: Sequence[str] | job_pb2.ShellTarget | None = None,
    payload: Any = None,
    max_attempts: int = 0,
    retry_initial: float | str | None = None,
    retry_max: float | str | None = None,
    retry_multiplier: float = 0.0,
    timeout: float | str | None = None,
    misfire: str = "once",
    catch_up_limit: int = 0,
    starting_deadline: float | str | None = None,
    overlap: str = "allow",
    jitter: float | str | None = None,
    idempotency_key: str = "",
    tenant: str = "",
    labels: Mapping[str, str] | None = None,
    job_id: str = "",
    after: Sequence[str] = (),
) -> job_pb2.Job:
    """The Job message for :meth:`Client.create_job`'s arguments.

    Durations are seconds or text such as ``"30s"`` (``timeout``, ``retry_initial`` and
    ``retry_max``: the first retry's backoff and the longest; ``retry_multiplier``: the growth
    per attempt, 0 for the default 2); ``payload`` is JSON-encoded unless it is
    bytes; ``misfire`` and ``overlap`` are names such as ``"catch_up"`` or ``"forbid"``.

    ``after``: the job's parents (ids, or names in its tenant): it runs once per fire of
    their root, after every parent's run for that fire succeeded, and has no ``schedule``.
    A job needs one of the two.

    Raises:
        InvalidArgument: A local value that cannot be converted, or both ``schedule`` and
            ``after`` given (nothing is sent).
    """
    job = job_pb2.Job(id=job_id, tenant=tenant, name=name, idempotency_key=idempotency_key)
    _set_when(job, schedule, tz, after)
    _set_target(job, handler, queue, http, shell)
    job.payload = encode_payload(payload)
    job.retry.max_attempts = max_attempts
    job.retry.initial_backoff_ms = to_duration_ms(retry_initial, "retry_initial")
    job.retry.max_backoff_ms = to_duration_ms(retry_max, "retry_max")
    job.retry.multiplier = retry_multiplier
    job.timeout_ms = to_duration_ms(timeout, "timeout")
    job.misfire.mode = parse_misfire(misfire)  # type: ignore[assignment]
    job.misfire.catch_up_limit = catch_up_limit
    job.misfire.starting_deadline_ms = to_duration_ms(starting_deadline, "starting_deadline")
    job.overlap = parse_overlap(overlap)  # type: ignore[assignment]
    job.jitter_ms = to_duration_ms(jitter, "jitter")
    job.labels.update(labels or {})
    return job


def build_update(
    job_id: str,
    *,
    expected_version: int = 0,
    payload: Any = UNSET,
    **changes: Any,
) -> scheduler_pb2.UpdateJobRequest:
    """An UpdateJobRequest whose ``update_paths`` name exactly the changes given.

    ``changes`` takes the keyword names of :meth:`Client.update_job`; a value of ``None``
    means "unchanged", except ``payload`` where ``None`` clears the payload.

    Raises:
        InvalidArgument: No change given, or a value that cannot be converted.
    """
    given = {k: v for k, v in changes.items() if v is not None}
    req = scheduler_pb2.UpdateJobRequest(expected_version=expected_version)
    job, paths = req.job, req.update_paths
    job.id = job_id
    if payload is not UNSET:
        job.payload = encode_payload(payload)
        paths.append("payload")
    _update_schedule(job, paths, given)
    _update_target(job, paths, given)
    _update_scalars(job, paths, given)
    if not paths:
        raise InvalidArgument("update", "nothing to update: give at least one change")
    return req


_SCALARS: dict[str, str] = {
    "name": "name",
    "max_attempts": "retry.max_attempts",
    "retry_initial": "retry.initial_backoff_ms",
    "retry_max": "retry.max_backoff_ms",
    "retry_multiplier": "retry.multiplier",
    "timeout": "timeout_ms",
    "misfire": "misfire.mode",
    "catch_up_limit": "misfire.catch_up_limit",
    "starting_deadline": "misfire.starting_deadline_ms",
    "overlap": "overlap",
    "jitter": "jitter_ms",
    "labels": "labels",
}
_KNOWN = {*_SCALARS, "schedule", "tz", "handler", "queue", "http", "shell", "after"}


def _update_schedule(job: job_pb2.Job, paths: Any, given: dict[str, Any]) -> None:
    unknown = sorted(set(given) - _KNOWN)
    if unknown:
        raise InvalidArgument(unknown[0], "is not an updatable field")
    if "schedule" in given:
        job.schedule.expr = given["schedule"]
        paths.append("schedule.expr")
    if "tz" in given:
        job.schedule.timezone = given["tz"]
        paths.append("schedule.timezone")
    if "after" in given:  # [] makes the job independent again (it needs a schedule then)
        after = given["after"]
        if isinstance(after, str):
            raise InvalidArgument("after", "give parents as a list of job ids or names")
        if after and "schedule" in given:
            raise InvalidArgument("after", "a job with parents runs when they succeed: no schedule")
        job.after.extend(after)
        paths.append("after")


def _update_target(job: job_pb2.Job, paths: Any, given: dict[str, Any]) -> None:
    if not {"handler", "http", "shell", "queue"} & set(given):
        return
    if "queue" in given and "handler" not in given:
        raise InvalidArgument("queue", "changing the queue needs the handler name too")
    _set_target(
        job, given.get("handler"), given.get("queue"), given.get("http"), given.get("shell")
    )
    paths.append("target")


def _update_scalars(job: job_pb2.Job, paths: Any, given: dict[str, Any]) -> None:
    converters: dict[str, Any] = {
        "name": lambda v: setattr(job, "name", v),
        "max_attempts": lambda v: setattr(job.retry, "max_attempts", v),
        "retry_initial": lambda v: setattr(
            job.retry, "initial_backoff_ms", to_duration_ms(v, "retry_initial")
        ),
        "retry_max": lambda v: setattr(job.retry, "max_backoff_ms", to_duration_ms(v, "retry_max")),
        "retry_multiplier": lambda v: setattr(job.retry, "multiplier", float(v)),
        "timeout": lambda v: setattr(job, "timeout_ms", to_duration_ms(v, "timeout")),
        "misfire": lambda v: setattr(job.misfire, "mode", parse_misfire(v)),
        "catch_up_limit": lambda v: setattr(job.misfire, "catch_up_limit", v),
        "starting_deadline": lambda v: setattr(
            job.misfire, "starting_deadline_ms", to_duration_ms(v, "starting_deadline")
        ),
        "overlap": lambda v: setattr(job, "overlap", parse_overlap(v)),
        "jitter": lambda v: setattr(job, "jitter_ms", to_duration_ms(v, "jitter")),
        "labels": job.labels.update,
    }
    for key, path in _SCALARS.items():
        if key in given:
            converters[key](given[key])
            paths.append(path)


def state_values(states: Iterable[int | str]) -> list[int]:
    """Execution states as enum numbers; names such as ``"failed"`` are accepted."""
    return [parse_state(s, "states") if isinstance(s, str) else int(s) for s in states]

"""UpdateJob: apply the named paths of a patch to a stored job, then validate the result."""

from __future__ import annotations

from collections.abc import Sequence

from google.protobuf.message import Message

from schedd._errors import InvalidArgument
from schedd.model._job import normalise_spec
from schedd.v1 import job_pb2

#: Top-level paths an update may name; ``target`` replaces the whole oneof.
MUTABLE_PATHS = (
    "name",
    "schedule",
    "target",
    "payload",
    "retry",
    "timeout_ms",
    "misfire",
    "overlap",
    "jitter_ms",
    "labels",
    "after",
)
_TARGETS = ("handler", "http", "shell")
_MESSAGE_PATHS = ("schedule", "retry", "misfire")


def apply_update(
    stored: job_pb2.Job, patch: job_pb2.Job, paths: Sequence[str], *, now_ms: int
) -> job_pb2.Job:
    """The stored job with the fields named by ``paths`` taken from ``patch``, validated.

    Paths are the top-level mutable fields (:data:`MUTABLE_PATHS`), a subfield of
    ``schedule``, ``retry`` or ``misfire`` (``"schedule.timezone"``, ``"retry.max_attempts"``),
    or ``handler``/``http``/``shell`` as aliases of ``target``. No paths means every mutable
    field. Id, tenant, idempotency key and created time are kept; ``updated_ms`` becomes
    ``now_ms``; the result is normalised like a new job. Neither argument is changed.

    Raises:
        InvalidArgument: ``update_paths`` for an unknown or immutable path, else the field the
            updated job breaks.
    """
    out = job_pb2.Job()
    out.CopyFrom(stored)
    for path in _expand(paths):
        _apply_path(out, patch, path)
    normalise_spec(out, anchor_ms=stored.created_ms or now_ms)
    out.updated_ms = now_ms
    return out


def _expand(paths: Sequence[str]) -> list[str]:
    if not paths:
        return list(MUTABLE_PATHS)
    seen: list[str] = []
    for raw in paths:
        path = raw.strip()
        path = path.removeprefix("job.")
        if path in _TARGETS:
            path = "target"
        head, _, sub = path.partition(".")
        valid = head in MUTABLE_PATHS and (
            not sub or (head in _MESSAGE_PATHS and _has_field(head, sub))
        )
        if not valid:
            raise InvalidArgument(
                "update_paths",
                f"{raw!r} cannot be updated (mutable: {', '.join(MUTABLE_PATHS)})",
            )
        if path not in seen:
            seen.append(path)
    return seen


def _has_field(head: str, sub: str) -> bool:
    descriptor = job_pb2.Job.DESCRIPTOR.fields_by_name[head].message_type
    return descriptor is not None and sub in descriptor.fields_by_name


def _apply_path(out: job_pb2.Job, patch: job_pb2.Job, path: str) -> None:
    if path == "target":
        kind = patch.WhichOneof("target")
        if kind is None:
            raise InvalidArgument("job.target", "update names target but the job sets none")
        getattr(out, kind).CopyFrom(getattr(patch, kind))
        return
    if path == "labels":
        out.labels.clear()
        out.labels.update(patch.labels)
        return
    if path == "after":
        del out.after[:]
        out.after.extend(patch.after)
        if patch.after:  # a job with parents has no schedule: it goes with them
            out.schedule.Clear()
        return
    head, _, sub = path.partition(".")
    if sub:
        _copy_field(getattr(out, head), getattr(patch, head), sub)
    else:
        _copy_field(out, patch, head)


def _copy_field(dst: Message, src: Message, name: str) -> None:
    field = dst.DESCRIPTOR.fields_by_name[name]
    if field.message_type is not None:
        getattr(dst, name).CopyFrom(getattr(src, name))
    else:
        setattr(dst, name, getattr(src, name))

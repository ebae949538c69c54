"""Job specs as documents (YAML or JSON) and back: what ``schedctl apply`` reads and what
``schedctl job get -o yaml`` prints.

The document is the shape :func:`~schedd.client.job_to_dict` produces, so a job printed with
``-o yaml`` applies unchanged. Output-only keys (``id``, ``version``, ``partition``, the
``*_ms``/``*_time`` timestamps) are ignored on the way in; any other unknown key is an error
that names it. Only ``name`` and ``schedule.expr`` are required; everything else takes the
defaults a create takes.

The fields an apply compares and updates are :data:`SPEC_PATHS` (the mutable part of a job,
plus ``paused``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from schedd._errors import InvalidArgument
from schedd.client._convert import decode_payload, encode_payload
from schedd.model import MUTABLE_PATHS, parse_misfire, parse_overlap
from schedd.v1 import job_pb2

#: What ``apply`` compares, in this order: the mutable paths of UpdateJob.
SPEC_PATHS: tuple[str, ...] = MUTABLE_PATHS

_OUTPUT = {
    "id", "version", "partition", "created_ms", "created_time", "updated_ms", "updated_time",
    "next_fire_ms", "next_fire_time", "last_fire_ms", "last_fire_time", "idempotency_key",
}  # fmt: skip
_TOP = {
    "tenant", "name", "schedule", "handler", "http", "shell", "payload", "retry", "timeout_ms",
    "misfire", "overlap", "jitter_ms", "paused", "labels",
}  # fmt: skip


def _mapping(value: Any, field: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise InvalidArgument(field, f"must be a mapping, got {type(value).__name__}")
    return value


def _keys(value: Mapping[str, Any], field: str, allowed: set[str]) -> None:
    for key in value:
        if key not in allowed:
            raise InvalidArgument(f"{field}.{key}" if field else str(key), "unknown field")


def _int(value: Any, field: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgument(field, f"must be an integer, got {value!r}")
    return value


def _str(value: Any, field: str) -> str:
    if not isinstance(value, str):
        raise InvalidArgument(field, f"must be a string, got {value!r}")
    return value


def _strs(value: Any, field: str) -> dict[str, str]:
    m = _mapping(value, field)
    return {str(k): _str(v, f"{field}.{k}") for k, v in m.items()}


def job_from_dict(doc: Any) -> tuple[job_pb2.Job, bool | None]:
    """The Job a spec document asks for, and its ``paused`` (None when the document does not
    say).

    Raises:
        InvalidArgument: naming the field: not a mapping, an unknown key, a wrong type, or a
            missing ``name`` or ``schedule.expr``.
    """
    d = _mapping(doc, "document")
    _keys(d, "", _TOP | _OUTPUT)
    job = job_pb2.Job(
        tenant=_str(d.get("tenant", ""), "tenant"), name=_str(d.get("name", ""), "name")
    )
    if not job.name:
        raise InvalidArgument("name", "is required")
    sched = _mapping(d.get("schedule"), "schedule") if "schedule" in d else {}
    _keys(sched, "schedule", {"expr", "timezone"})
    job.schedule.expr = _str(sched.get("expr", ""), "schedule.expr")
    if not job.schedule.expr:
        raise InvalidArgument("schedule.expr", "is required")
    job.schedule.timezone = _str(sched.get("timezone", ""), "schedule.timezone")
    _target(job, d)
    if "payload" in d and d["payload"] is not None:
        try:
            job.payload = encode_payload(d["payload"])
        except (TypeError, ValueError) as exc:
            raise InvalidArgument("payload", f"cannot be encoded: {exc}") from exc
    retry = _mapping(d["retry"], "retry") if "retry" in d else {}
    _keys(retry, "retry", {"max_attempts", "initial_backoff_ms", "max_backoff_ms", "multiplier"})
    job.retry.max_attempts = _int(retry.get("max_attempts", 0), "retry.max_attempts")
    job.retry.initial_backoff_ms = _int(
        retry.get("initial_backoff_ms", 0), "retry.initial_backoff_ms"
    )
    job.retry.max_backoff_ms = _int(retry.get("max_backoff_ms", 0), "retry.max_backoff_ms")
    mult = retry.get("multiplier", 0.0)
    if isinstance(mult, bool) or not isinstance(mult, int | float):
        raise InvalidArgument("retry.multiplier", f"must be a number, got {mult!r}")
    job.retry.multiplier = float(mult)
    job.timeout_ms = _int(d.get("timeout_ms", 0), "timeout_ms")
    misfire = _mapping(d["misfire"], "misfire") if "misfire" in d else {}
    _keys(misfire, "misfire", {"mode", "catch_up_limit", "starting_deadline_ms"})
    if "mode" in misfire:
        job.misfire.mode = parse_misfire(_str(misfire["mode"], "misfire.mode"), "misfire.mode")  # type: ignore[assignment]
    job.misfire.catch_up_limit = _int(misfire.get("catch_up_limit", 0), "misfire.catch_up_limit")
    job.misfire.starting_deadline_ms = _int(
        misfire.get("starting_deadline_ms", 0), "misfire.starting_deadline_ms"
    )
    if "overlap" in d:
        job.overlap = parse_overlap(_str(d["overlap"], "overlap"))  # type: ignore[assignment]
    job.jitter_ms = _int(d.get("jitter_ms", 0), "jitter_ms")
    job.labels.update(_strs(d.get("labels") or {}, "labels"))
    paused = d.get("paused")
    if paused is not None and not isinstance(paused, bool):
        raise InvalidArgument("paused", f"must be true or false, got {paused!r}")
    return job, paused


def _target(job: job_pb2.Job, d: Mapping[str, Any]) -> None:
    kinds = [k for k in ("handler", "http", "shell") if k in d]
    if len(kinds) > 1:
        raise InvalidArgument(kinds[1], f"give one of handler, http or shell, not {kinds}")
    if not kinds:
        return  # the server names the missing target
    kind = kinds[0]
    body = d[kind]
    if kind == "handler":
        if isinstance(body, str):  # the short form: handler: send_report
            job.handler.name = body
            return
        h = _mapping(body, "handler")
        _keys(h, "handler", {"name", "queue"})
        job.handler.name = _str(h.get("name", ""), "handler.name")
        job.handler.queue = _str(h.get("queue", ""), "handler.queue")
    elif kind == "http":
        if isinstance(body, str):
            job.http.url = body
            return
        h = _mapping(body, "http")
        _keys(h, "http", {"url", "method", "headers", "success_codes"})
        job.http.url = _str(h.get("url", ""), "http.url")
        job.http.method = _str(h.get("method", ""), "http.method")
        job.http.headers.update(_strs(h.get("headers") or {}, "http.headers"))
        codes = h.get("success_codes") or []
        if not isinstance(codes, list):
            raise InvalidArgument("http.success_codes", "must be a list of status codes")
        job.http.success_codes.extend(
            _int(c, f"http.success_codes[{i}]") for i, c in enumerate(codes)
        )
    else:
        s = _mapping(body, "shell")
        _keys(s, "shell", {"argv", "cwd", "env"})
        argv = s.get("argv")
        if not isinstance(argv, list) or not argv:
            raise InvalidArgument("shell.argv", "must be a non-empty list of strings")
        job.shell.argv.extend(_str(a, f"shell.argv[{i}]") for i, a in enumerate(argv))
        job.shell.cwd = _str(s.get("cwd", ""), "shell.cwd")
        job.shell.env.update(_strs(s.get("env") or {}, "shell.env"))


def changed_paths(desired: job_pb2.Job, stored: job_pb2.Job) -> list[str]:
    """The :data:`SPEC_PATHS` on which two normalised jobs differ, in that order."""
    out = []
    for path in SPEC_PATHS:
        if path == "target":
            kind = desired.WhichOneof("target")
            if kind != stored.WhichOneof("target") or (
                kind is not None and getattr(desired, kind) != getattr(stored, kind)
            ):
                out.append(path)
        elif path == "labels":
            if dict(desired.labels) != dict(stored.labels):
                out.append(path)
        elif path == "payload":  # JSON compared as values: spacing and key order aside
            if decode_payload(desired.payload) != decode_payload(stored.payload):
                out.append(path)
        elif getattr(desired, path) != getattr(stored, path):
            out.append(path)
    return out

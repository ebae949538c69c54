"""Job specs as documents (YAML or JSON) and back: what ``schedctl apply`` reads and what
``schedctl job get -o yaml`` prints.

The document is the shape :func:`~schedd.client.job_to_dict` produces, so a job printed with
``-o yaml`` applies unchanged. Output-only keys (``id``, ``version``, ``partition``, the
``*_ms``/``*_time`` timestamps) are ignored on the way in; any other unknown key is an error
that names it. Only ``name`` and ``schedule.expr`` (or ``after``: the jobs it runs after, by
name in its tenant or by id) are required; everything else takes the defaults a create takes.

The fields an apply compares and updates are :data:`SPEC_PATHS` (the mutable part of a job,
plus ``paused``).

:func:`job_to_spec` is the inverse that ``schedctl export`` writes: only what apply reads,
defaults left out. A document with ``kind: TenantLimits`` is a tenant's limits
(:func:`limits_from_dict`, :func:`limits_to_spec`); a job document has no kind (or
``kind: Job``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from schedd._errors import InvalidArgument
from schedd.client._convert import decode_payload, encode_payload
from schedd.model import (  # the defaults normalise_spec fills in: export leaves these out
    DEFAULT_CATCH_UP_LIMIT,
    DEFAULT_INITIAL_BACKOFF_MS,
    DEFAULT_MAX_ATTEMPTS,
    DEFAULT_MAX_BACKOFF_MS,
    DEFAULT_MULTIPLIER,
    DEFAULT_QUEUE,
    DEFAULT_TIMEOUT_MS,
    DEFAULT_TIMEZONE,
    MUTABLE_PATHS,
    default_burst,
    misfire_name,
    overlap_name,
    parse_misfire,
    parse_overlap,
)
from schedd.schedule import pin_anchor
from schedd.v1 import job_pb2, scheduler_pb2

#: What ``apply`` compares, in this order: the mutable paths of UpdateJob.
SPEC_PATHS: tuple[str, ...] = MUTABLE_PATHS
#: The ``kind`` of a tenant limits document (a job document has none, or ``Job``).
KIND_JOB, KIND_LIMITS = "Job", "TenantLimits"
_LIMIT_KEYS = ("rate", "burst", "max_running", "max_jobs", "api_rate", "api_burst")

_OUTPUT = {
    "id", "version", "partition", "created_ms", "created_time", "updated_ms", "updated_time",
    "next_fire_ms", "next_fire_time", "last_fire_ms", "last_fire_time", "idempotency_key",
    "children",
}  # fmt: skip
_TOP = {
    "tenant", "name", "schedule", "handler", "http", "shell", "payload", "retry", "timeout_ms",
    "misfire", "overlap", "jitter_ms", "paused", "labels", "after",
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
    d = dict(_mapping(doc, "document"))
    if d.pop("kind", KIND_JOB) != KIND_JOB:
        raise InvalidArgument("kind", f"unknown kind {doc['kind']!r} ({KIND_JOB} or {KIND_LIMITS})")
    _keys(d, "", _TOP | _OUTPUT)
    job = job_pb2.Job(
        tenant=_str(d.get("tenant", ""), "tenant"), name=_str(d.get("name", ""), "name")
    )
    if not job.name:
        raise InvalidArgument("name", "is required")
    sched = _mapping(d.get("schedule"), "schedule") if "schedule" in d else {}
    _keys(sched, "schedule", {"expr", "timezone"})
    job.schedule.expr = _str(sched.get("expr", ""), "schedule.expr")
    job.after.extend(_after(d.get("after")))
    if not job.schedule.expr and not job.after:
        raise InvalidArgument("schedule.expr", "is required (or after: the jobs it runs after)")
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


def _after(value: Any) -> list[str]:
    """A document's ``after``: a list of job names (or ids) of its tenant; one name alone
    is taken as a list of one."""
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    if not isinstance(value, list):
        raise InvalidArgument("after", f"must be a list of job names, got {value!r}")
    return [_str(v, f"after[{n}]") for n, v in enumerate(value)]


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


def job_to_spec(
    job: job_pb2.Job, *, paused: bool = True, names: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """The document :func:`job_from_dict` reads back as ``job`` (a stored, normalised job):
    ``name``, ``tenant``, ``schedule`` and the target always, every other field only when it
    is not the default a create fills in, and ``paused`` (the job's state) unless
    ``paused=False``. Output-only fields (id, version, times, partition) and the
    idempotency key (apply ignores it) are left out.

    A job with parents gets ``after``, each parent by its name in ``names`` (job id ->
    name; its id when not there) and no schedule. An ``@every`` or ``@after`` schedule
    gets its anchor written out (``@every 30s from
    <created>``, :func:`~schedd.schedule.pin_anchor`), so the job fires at the same instants
    wherever the document is applied.

    Example::

        {"name": "ping", "tenant": "default",
         "schedule": {"expr": "@every 30s from 2026-03-01T12:00:03.417Z"},
         "http": {"url": "https://example.com/hook", "method": "GET"}, "paused": False}
    """
    out: dict[str, Any] = {"name": job.name, "tenant": job.tenant}
    if job.after:
        out["after"] = [(names or {}).get(p, p) for p in job.after]
    else:
        sched: dict[str, Any] = {"expr": pin_anchor(job.schedule.expr, job.created_ms)}
        if job.schedule.timezone not in ("", DEFAULT_TIMEZONE):
            sched["timezone"] = job.schedule.timezone
        out["schedule"] = sched
    out.update(_target_spec(job))
    if job.payload:
        out["payload"] = decode_payload(job.payload)
    retry = _retry_spec(job.retry)
    if retry:
        out["retry"] = retry
    if job.timeout_ms not in (0, DEFAULT_TIMEOUT_MS):
        out["timeout_ms"] = job.timeout_ms
    misfire = _misfire_spec(job.misfire)
    if misfire:
        out["misfire"] = misfire
    if job.overlap not in (job_pb2.OVERLAP_POLICY_UNSPECIFIED, job_pb2.OVERLAP_ALLOW):
        out["overlap"] = overlap_name(job.overlap).lower()
    if job.jitter_ms:
        out["jitter_ms"] = job.jitter_ms
    if job.labels:
        out["labels"] = dict(sorted(job.labels.items()))
    if paused:
        out["paused"] = job.paused
    return out


def _target_spec(job: job_pb2.Job) -> dict[str, Any]:
    kind = job.WhichOneof("target")
    if kind == "handler":
        h = job.handler
        # The short form when the queue is the default one: ``handler: send_report``.
        short = h.queue in ("", DEFAULT_QUEUE)
        return {"handler": h.name if short else {"name": h.name, "queue": h.queue}}
    if kind == "http":
        http: dict[str, Any] = {"url": job.http.url}
        if job.http.method not in ("", "POST"):
            http["method"] = job.http.method
        if job.http.headers:
            http["headers"] = dict(sorted(job.http.headers.items()))
        if job.http.success_codes:
            http["success_codes"] = list(job.http.success_codes)
        return {"http": http}
    if kind == "shell":
        shell: dict[str, Any] = {"argv": list(job.shell.argv)}
        if job.shell.cwd:
            shell["cwd"] = job.shell.cwd
        if job.shell.env:
            shell["env"] = dict(sorted(job.shell.env.items()))
        return {"shell": shell}
    return {}


def _misfire_spec(misfire: job_pb2.MisfirePolicy) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if misfire.mode not in (job_pb2.MISFIRE_MODE_UNSPECIFIED, job_pb2.MISFIRE_ONCE):
        out["mode"] = misfire_name(misfire.mode).lower()
    if misfire.catch_up_limit not in (0, DEFAULT_CATCH_UP_LIMIT):
        out["catch_up_limit"] = misfire.catch_up_limit
    if misfire.starting_deadline_ms:
        out["starting_deadline_ms"] = misfire.starting_deadline_ms
    return out


def _retry_spec(retry: job_pb2.RetryPolicy) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if retry.max_attempts not in (0, DEFAULT_MAX_ATTEMPTS):
        out["max_attempts"] = retry.max_attempts
    initial = retry.initial_backoff_ms or DEFAULT_INITIAL_BACKOFF_MS
    if initial != DEFAULT_INITIAL_BACKOFF_MS:
        out["initial_backoff_ms"] = initial
    # The default maximum follows the initial backoff (normalise_spec): compare with that.
    if retry.max_backoff_ms not in (0, max(DEFAULT_MAX_BACKOFF_MS, initial)):
        out["max_backoff_ms"] = retry.max_backoff_ms
    if retry.multiplier not in (0.0, DEFAULT_MULTIPLIER):
        out["multiplier"] = retry.multiplier
    return out


def payload_is_json(payload: bytes) -> bool:
    """Whether a stored payload survives a document: empty or JSON. Any other bytes (text,
    binary) would come back from :func:`job_from_dict` JSON-encoded: different bytes."""
    if not payload:
        return True
    try:
        json.loads(payload)
    except ValueError:  # UnicodeDecodeError is one
        return False
    return True


def limits_from_dict(doc: Mapping[str, Any]) -> scheduler_pb2.TenantLimits:
    """The limits a ``kind: TenantLimits`` document sets (not yet normalised: see
    :func:`~schedd.model.validate_tenant_limits`). Missing limits are 0: off, as with
    ``schedctl tenant set``, which replaces a tenant's limits whole.

    Raises:
        InvalidArgument: naming the field: an unknown key, a missing tenant, a wrong type.
    """
    _keys(doc, "", {"kind", "tenant", "updated_ms", "updated_time", *_LIMIT_KEYS})
    tenant = _str(doc.get("tenant", ""), "tenant")
    if not tenant:
        raise InvalidArgument("tenant", "is required")
    out = scheduler_pb2.TenantLimits(tenant=tenant)
    for key in _LIMIT_KEYS:
        value = doc.get(key, 0)
        if key in ("rate", "api_rate"):
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise InvalidArgument(key, f"must be a number, got {value!r}")
            setattr(out, key, float(value))
        else:
            setattr(out, key, _int(value, key))
    return out


def limits_to_spec(limits: scheduler_pb2.TenantLimits) -> dict[str, Any]:
    """A ``kind: TenantLimits`` document of stored limits: the limits that are set, bursts
    only when not the default (a second's worth of the rate)."""
    out: dict[str, Any] = {"kind": KIND_LIMITS, "tenant": limits.tenant}
    if limits.rate:
        out["rate"] = limits.rate
        if limits.burst != default_burst(limits.rate):
            out["burst"] = limits.burst
    if limits.max_running:
        out["max_running"] = limits.max_running
    if limits.max_jobs:
        out["max_jobs"] = limits.max_jobs
    if limits.api_rate:
        out["api_rate"] = limits.api_rate
        if limits.api_burst != default_burst(limits.api_rate):
            out["api_burst"] = limits.api_burst
    return out

"""Wire types to JSON-friendly dicts, and the small value conversions the client needs.

Times appear twice: ``*_ms`` (the raw milliseconds) beside ``*_time`` (ISO-8601 UTC such as
``"2026-03-08T07:00:00Z"``, or ``None`` when unset). Enums appear as their names without the
prefix (``"SUCCEEDED"``, ``"CATCH_UP"``). Payloads and results are decoded as JSON when they
parse, else as text, else as ``{"base64": ...}``.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

from schedd._errors import InvalidArgument
from schedd.model import misfire_name, overlap_name, state_name, trigger_name
from schedd.v1 import auth_pb2, execution_pb2, job_pb2, scheduler_pb2

__all__ = [
    "cluster_status_to_dict",
    "decode_payload",
    "encode_payload",
    "execution_to_dict",
    "iso_utc",
    "job_to_dict",
    "missing_nodes_to_dicts",
    "parse_time_ms",
    "to_duration_ms",
    "worker_to_dict",
]


def iso_utc(ms: int) -> str | None:
    """``1772953200000`` -> ``"2026-03-08T07:00:00Z"`` (milliseconds shown when non-zero)."""
    if not ms:
        return None
    when = datetime.fromtimestamp(ms / 1000, tz=UTC)
    text = when.strftime("%Y-%m-%dT%H:%M:%S")
    if ms % 1000:
        text += f".{ms % 1000:03d}"
    return text + "Z"


def parse_time_ms(value: datetime | str | int | float, field: str = "time") -> int:
    """An instant as UTC milliseconds: a datetime (naive means UTC), ISO-8601 text, or ms.

    Raises:
        InvalidArgument: Text that is not ISO-8601.
    """
    if isinstance(value, datetime):
        when = value if value.tzinfo else value.replace(tzinfo=UTC)
        return int(when.timestamp() * 1000)
    if isinstance(value, int | float):
        return int(value)
    text = value.strip()
    if text.isdigit():
        return int(text)
    try:
        parsed = datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError as exc:
        raise InvalidArgument(field, f"{value!r} is not an ISO-8601 time") from exc
    return parse_time_ms(parsed, field)


def to_duration_ms(value: float | str | None, field: str = "duration") -> int:
    """A duration as milliseconds: seconds (int or float), text like ``"30s"``, or None (0).

    Raises:
        InvalidArgument: Negative, or text the schedule module cannot read.
    """
    if value is None:
        return 0
    if isinstance(value, str):
        from schedd.schedule import parse_duration_ms

        return int(parse_duration_ms(value, field))
    if value < 0:
        raise InvalidArgument(field, f"must not be negative (got {value})")
    return round(value * 1000)


def encode_payload(payload: Any) -> bytes:
    """Bytes as they are, None as empty, anything else as compact JSON."""
    if payload is None:
        return b""
    if isinstance(payload, bytes | bytearray | memoryview):
        return bytes(payload)
    try:
        return json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode()
    except (TypeError, ValueError) as exc:
        raise InvalidArgument("payload", f"cannot be encoded as JSON: {exc}") from exc


def decode_payload(data: bytes) -> Any:
    """The inverse of :func:`encode_payload` for display: JSON, else text, else base64."""
    if not data:
        return None
    try:
        return json.loads(data)
    except ValueError:
        pass
    try:
        return data.decode()
    except UnicodeDecodeError:
        return {"base64": base64.b64encode(data).decode()}


def _time_pair(out: dict[str, Any], name: str, ms: int) -> None:
    out[f"{name}_ms"] = ms
    out[f"{name}_time"] = iso_utc(ms)


def _target_to_dict(job: job_pb2.Job) -> dict[str, Any]:
    kind = job.WhichOneof("target")
    if kind == "handler":
        return {"handler": {"name": job.handler.name, "queue": job.handler.queue}}
    if kind == "http":
        http = job.http
        return {
            "http": {
                "url": http.url,
                "method": http.method,
                "headers": dict(http.headers),
                "success_codes": list(http.success_codes),
            }
        }
    if kind == "shell":
        shell = job.shell
        return {"shell": {"argv": list(shell.argv), "cwd": shell.cwd, "env": dict(shell.env)}}
    return {}


def job_to_dict(job: job_pb2.Job) -> dict[str, Any]:
    """A JSON-friendly dict of a job (see the module docstring for the conventions)."""
    out: dict[str, Any] = {
        "id": job.id,
        "tenant": job.tenant,
        "name": job.name,
        "schedule": {"expr": job.schedule.expr, "timezone": job.schedule.timezone},
        **_target_to_dict(job),
        "payload": decode_payload(job.payload),
        "retry": {
            "max_attempts": job.retry.max_attempts,
            "initial_backoff_ms": job.retry.initial_backoff_ms,
            "max_backoff_ms": job.retry.max_backoff_ms,
            "multiplier": job.retry.multiplier,
        },
        "timeout_ms": job.timeout_ms,
        "misfire": {
            "mode": misfire_name(job.misfire.mode),
            "catch_up_limit": job.misfire.catch_up_limit,
            "starting_deadline_ms": job.misfire.starting_deadline_ms,
        },
        "overlap": overlap_name(job.overlap),
        "jitter_ms": job.jitter_ms,
        "idempotency_key": job.idempotency_key,
        "paused": job.paused,
        "labels": dict(sorted(job.labels.items())),
        "after": list(job.after),
        "children": list(job.children),
    }
    for name in ("created", "updated", "next_fire", "last_fire"):
        _time_pair(out, name, getattr(job, f"{name}_ms"))
    out["version"] = job.version
    out["partition"] = job.partition
    return out


def execution_to_dict(execution: execution_pb2.Execution) -> dict[str, Any]:
    """A JSON-friendly dict of an execution; ``scheduled_time`` is the fire time in UTC."""
    e = execution
    out: dict[str, Any] = {
        "id": e.id,
        "job_id": e.job_id,
        "job_name": e.job_name,
        "tenant": e.tenant,
    }
    for name in ("scheduled", "due", "dispatched", "started", "finished"):
        _time_pair(out, name, getattr(e, f"{name}_ms"))
    out.update(
        {
            "state": state_name(e.state),
            "attempt": e.attempt,
            "max_attempts": e.max_attempts,
            "fencing_token": e.fencing_token,
            "worker_id": e.worker_id,
            "queue": e.queue,
            "handler": e.handler,
            "trigger": trigger_name(e.trigger),
            "partition": e.partition,
            "error": e.error,
            "reason": e.reason,
            "result": decode_payload(e.result),
            "has_checkpoint": bool(e.checkpoint),
            "throttled_ms": e.throttled_ms,
            "waiting": e.waiting,
        }
    )
    _time_pair(out, "waiting_since", e.waiting_since_ms)
    return out


def execution_note(e: execution_pb2.Execution) -> str:
    """The one line a person wants beside a run: its error, else its reason, else why it
    waits (``waiting: no worker serves handler 'x' on queue 'q' since 12:01:03 UTC``)."""
    text = e.error or e.reason
    if text:
        return text.splitlines()[0]
    if not e.waiting:
        return ""
    if not e.waiting_since_ms:
        return f"waiting: {e.waiting}"
    since = datetime.fromtimestamp(e.waiting_since_ms / 1000, UTC)
    return f"waiting: {e.waiting} since {since:%H:%M:%S} UTC"


def tenant_limits_to_dict(limits: scheduler_pb2.TenantLimits) -> dict[str, Any]:
    """A JSON-friendly dict of a tenant's limits (0: that limit is off)."""
    return {
        "tenant": limits.tenant,
        "rate": limits.rate,
        "burst": limits.burst,
        "max_running": limits.max_running,
        "max_jobs": limits.max_jobs,
        "api_rate": limits.api_rate,
        "api_burst": limits.api_burst,
        "updated_ms": limits.updated_ms,
        "updated_time": iso_utc(limits.updated_ms),
    }


def token_to_dict(token: auth_pb2.ApiToken) -> dict[str, Any]:
    """A JSON-friendly dict of a token (never its secret or hash)."""
    return {
        "id": token.id,
        "role": token.role,
        "tenant": token.tenant,
        "description": token.description,
        "queues": list(token.queues),
        "tenants": list(token.tenants),
        "created_by": token.created_by,
        "created_time": iso_utc(token.created_ms),
        "expires_time": iso_utc(token.expires_ms) if token.expires_ms else None,
        "revoked_time": iso_utc(token.revoked_ms) if token.revoked_ms else None,
    }


def audit_to_dict(entry: auth_pb2.AuditEntry) -> dict[str, Any]:
    """A JSON-friendly dict of an audit entry."""
    return {
        "id": entry.id,
        "time": iso_utc(entry.at_ms),
        "actor": entry.actor,
        "role": entry.role,
        "tenant": entry.tenant,
        "method": entry.method,
        "target": entry.target,
        "peer": entry.peer,
        "node_id": entry.node_id,
        "code": entry.code,
        "detail": entry.detail,
    }


def _rows(messages: Any, fields: Mapping[str, str]) -> list[dict[str, Any]]:
    return [{key: getattr(m, attr) for key, attr in fields.items()} for m in messages]


def missing_nodes_to_dicts(missing: Iterable[scheduler_pb2.MissingNode]) -> list[dict[str, str]]:
    """The nodes that did not answer a cluster-wide call: node_id, address, reason."""
    return [{"node_id": m.node_id, "address": m.address, "reason": m.reason} for m in missing]


def worker_to_dict(w: scheduler_pb2.WorkerStatus) -> dict[str, Any]:
    """A JSON-friendly dict of a worker; ``node_ids``: every node it is connected to."""
    return {
        "worker_id": w.worker_id,
        "node_id": w.node_id,
        "node_ids": list(w.node_ids) or ([w.node_id] if w.node_id else []),
        "queues": list(w.queues),
        "handlers": list(w.handlers),
        "capacity": w.capacity,
        "in_flight": w.in_flight,
        "prefetch": w.prefetch,
        "held": w.held,
        "connected_ms": w.connected_ms,
        "connected_time": iso_utc(w.connected_ms),
    }


def queue_to_dict(q: scheduler_pb2.QueueStatus) -> dict[str, Any]:
    """A JSON-friendly dict of a queue's row; ``free_slots`` None when not reported (a
    tenant's token)."""
    return {
        "queue": q.queue,
        "due": q.due,
        "held": q.held,
        "running": q.running,
        "workers": q.workers,
        "capacity": q.capacity,
        "free_slots": q.free_slots if q.HasField("free_slots") else None,
    }


def _node_to_dict(n: scheduler_pb2.NodeStatus) -> dict[str, Any]:
    out: dict[str, Any] = {
        "node_id": n.node_id,
        "address": n.address,
        "version": n.version,
        "started_ms": n.started_ms,
        "clock_ms": n.clock_ms,
        "partitions_owned": n.partitions_owned,
        "started_time": iso_utc(n.started_ms),
        "reported": n.reported,
    }
    if n.reported:
        out["clock_skew_ms"] = n.clock_skew_ms if n.clock_skew_known else None
        out["eligible"] = n.eligible
        out["ineligible_reason"] = n.ineligible_reason
        out["owned"] = [{"partition": p.partition, "epoch": p.epoch} for p in n.owned]
    return out


def cluster_status_to_dict(status: scheduler_pb2.ClusterStatus) -> dict[str, Any]:
    """A JSON-friendly dict of the cluster status: nodes (with their own reports), partitions
    (owner, epoch), workers, and the nodes that did not answer."""
    return {
        "cluster_id": status.cluster_id,
        "partition_count": status.partition_count,
        "nodes": [_node_to_dict(n) for n in status.nodes],
        "partitions": _rows(
            status.partitions, {"partition": "partition", "owner": "owner", "epoch": "epoch"}
        ),
        "workers": [worker_to_dict(w) for w in status.workers],
        "missing_nodes": missing_nodes_to_dicts(status.missing_nodes),
    }


def job_state_word(job: job_pb2.Job) -> str:
    """``paused``, ``completed`` (no fire left: a one-shot that has fired) or ``active``."""
    if job.paused:
        return "paused"
    return "active" if job.next_fire_ms else "completed"

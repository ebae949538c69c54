"""Fire times and lateness for display: what `schedctl preview`, `job describe` and the
dashboard show."""

from __future__ import annotations

from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

from schedd.client._convert import iso_utc
from schedd.v1 import execution_pb2, job_pb2


def fire_list(
    expr: str, zone_name: str, *, anchor_ms: int, after_ms: int, count: int
) -> list[dict[str, Any]]:
    """The next ``count`` fires of ``expr`` after ``after_ms``: ``{"ms", "utc", "local"}``
    each (local: ISO-8601 in ``zone_name``, milliseconds shown only when there are some).

    Raises:
        InvalidArgument: The expression or the zone cannot be used.
    """
    from schedd.schedule import parse_schedule

    schedule = parse_schedule(expr, zone_name, anchor_ms=anchor_ms)
    zone = ZoneInfo(zone_name)
    out = []
    for ms in schedule.fires(after_ms, limit=count):
        local = datetime.fromtimestamp(ms / 1000, tz=zone)
        spec = "milliseconds" if ms % 1000 else "seconds"
        out.append({"ms": ms, "utc": iso_utc(ms), "local": local.isoformat(timespec=spec)})
    return out


def next_fires(job: job_pb2.Job, now_ms: int, count: int) -> list[dict[str, Any]]:
    """A stored job's next ``count`` fire times after now (before jitter; none when paused),
    in UTC and in its zone (:func:`fire_list`)."""
    if job.paused or count <= 0:
        return []
    return fire_list(
        job.schedule.expr,
        job.schedule.timezone or "UTC",
        anchor_ms=job.created_ms or now_ms,
        after_ms=now_ms,
        count=count,
    )


def lateness_ms(ex: execution_pb2.Execution) -> int | None:
    """Start minus due (the scheduler's lateness plus any tenant throttling), once started."""
    return ex.started_ms - ex.due_ms if ex.started_ms and ex.due_ms else None

"""Fire times and lateness for display: what `schedctl preview`, `job describe` and the
dashboard show."""

from __future__ import annotations

from collections.abc import Sequence
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


def dst_notes(fires_ms: Sequence[int], zone: str, since_ms: int | None = None) -> list[str]:
    """A note per fire: where the zone's UTC offset changed since the previous fire (for the
    first, since ``since_ms`` when given: a preview's start) (a DST transition between them:
    the clocks went forward or back), or where the local time falls in an hour the zone
    repeats (it occurs twice); "" otherwise."""
    tz = ZoneInfo(zone or "UTC")
    notes: list[str] = []
    prev: int | None = None
    if since_ms is not None:
        start = datetime.fromtimestamp(since_ms / 1000, tz=tz).utcoffset()
        prev = int(start.total_seconds()) if start is not None else 0
    for ms in fires_ms:
        local = datetime.fromtimestamp(ms / 1000, tz=tz)
        offset = local.utcoffset()
        off_s = int(offset.total_seconds()) if offset is not None else 0
        note = ""
        if prev is not None and off_s != prev:
            way = "forward" if off_s > prev else "back"
            change = f"UTC{_offset(prev)} → UTC{_offset(off_s)}"
            before = "the previous fire" if notes else "the start"
            note = f"DST: clocks went {way} since {before} ({change})"
        elif local.fold == 1 or _ambiguous(local, tz):
            note = "in a repeated hour (DST): this local time occurs twice"
        notes.append(note)
        prev = off_s
    return notes


def _ambiguous(local: datetime, tz: ZoneInfo) -> bool:
    naive = local.replace(tzinfo=None)
    a = naive.replace(tzinfo=tz, fold=0).utcoffset()
    b = naive.replace(tzinfo=tz, fold=1).utcoffset()
    return a != b and a is not None and b is not None and a > b


def _offset(seconds: int) -> str:
    sign = "+" if seconds >= 0 else "-"
    m = abs(seconds) // 60
    return f"{sign}{m // 60:02d}:{m % 60:02d}"

"""Time zones: validation, and the UTC-offset timeline of a zone as constant-offset segments.

zoneinfo does not expose a zone's transitions, so they are found by probing the offset every
4 days through a UTC year and bisecting to the second where it changes (cached per zone and
year, ~0.1 ms each). Assumption: no zone changes its offset and back within 4 days (none of
the tzdata zones do after 1970; the tests check the zones we list against a brute force).
"""

from __future__ import annotations

import functools
import re
from bisect import bisect_right
from datetime import UTC, datetime
from typing import NamedTuple
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from schedd._errors import InvalidSchedule

_FIELD = "schedule.timezone"
_NAME = re.compile(r"[A-Za-z0-9_+\-]+(/[A-Za-z0-9_+\-]+)*")
_PROBE_S = 4 * 86_400


class Segment(NamedTuple):
    """A UTC interval ``[start, end)`` (seconds) during which the zone's offset is ``off``.

    ``prev_off`` is the offset just before ``start``: ``prev_off < off`` means a gap in wall
    time opens at ``start`` (spring forward), ``prev_off > off`` a repeated interval.
    Segments never span a UTC year boundary, so some boundaries change nothing.
    """

    start: int
    end: int
    off: int
    prev_off: int


def validate_timezone(tz: str) -> str:
    """Check an IANA zone name and return its canonical spelling.

    Args:
        tz: A name such as ``"Europe/Berlin"`` or ``"UTC"``. Callers map an empty field to
            ``"UTC"`` themselves; here ``""`` is an error.

    Returns:
        The name as zoneinfo knows it (``"utc"`` becomes ``"UTC"``).

    Raises:
        InvalidSchedule: field ``schedule.timezone``, for an empty, path-like (``"../etc"``,
            ``"/x"``), spaced or unknown name.
    """
    if not tz:
        raise InvalidSchedule("time zone is empty", field=_FIELD)
    if tz.upper() == "UTC":
        return "UTC"
    if _NAME.fullmatch(tz) is None or ".." in tz.split("/"):
        raise InvalidSchedule(
            f"invalid time zone {tz!r}: expected an IANA name such as 'Europe/Berlin'",
            field=_FIELD,
        )
    try:
        _zone(tz)
    except (ZoneInfoNotFoundError, ValueError, OSError) as exc:
        raise InvalidSchedule(f"unknown time zone {tz!r}", field=_FIELD) from exc
    return tz


@functools.lru_cache(maxsize=1024)
def _zone(tz: str) -> ZoneInfo:
    return ZoneInfo(tz)


def zone(tz: str) -> ZoneInfo:
    """The ZoneInfo for an already validated name."""
    return _zone(tz)


def offset_at(tz: str, t: int) -> int:
    """UTC offset of zone ``tz`` at UTC second ``t``, in seconds."""
    off = datetime.fromtimestamp(t, _zone(tz)).utcoffset()
    return int(off.total_seconds()) if off is not None else 0


def _year_start(year: int) -> int:
    return int(datetime(year, 1, 1, tzinfo=UTC).timestamp())


@functools.lru_cache(maxsize=4096)
def _year_bounds(tz: str, year: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Segment boundaries of one UTC year (both ends included) and the offset after each."""
    y0, y1 = _year_start(year), _year_start(year + 1)
    bounds, offs = [y0], [offset_at(tz, y0)]
    prev_t, prev = y0, offs[0]
    t = y0
    while t < y1:
        t = min(t + _PROBE_S, y1)
        cur = offset_at(tz, t)
        if cur != prev:
            lo, hi = prev_t, t  # offset(lo) == prev, offset(hi) != prev
            while hi - lo > 1:
                mid = (lo + hi) // 2
                if offset_at(tz, mid) == prev:
                    lo = mid
                else:
                    hi = mid
            if hi < y1:
                bounds.append(hi)
                offs.append(cur)
        prev_t, prev = t, cur
    bounds.append(y1)
    return tuple(bounds), tuple(offs)


def segment_at(tz: str, t: int) -> Segment:
    """The constant-offset segment of zone ``tz`` containing UTC second ``t``."""
    if tz == "UTC":
        year = datetime.fromtimestamp(t, UTC).year
        return Segment(_year_start(year), _year_start(year + 1), 0, 0)
    year = datetime.fromtimestamp(t, UTC).year
    bounds, offs = _year_bounds(tz, year)
    i = bisect_right(bounds, t) - 1
    start = bounds[i]
    prev_off = offs[i - 1] if i > 0 else offset_at(tz, start - 1)
    return Segment(start, bounds[i + 1], offs[i], prev_off)

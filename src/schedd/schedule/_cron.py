"""Cron stepping in a time zone, with Debian cron's DST rule, from a UTC cursor.

Model: a zone's timeline is a run of constant-offset segments (see ``_tz.Segment``). Inside
one segment, local wall time is UTC + offset, so the next fire is the next *naive* match of
the expression on the wall clock (seconds since 1970-01-01 00:00 wall time), shifted back
by the offset. At a segment boundary the DST rule decides:

* spring forward (gap of wall times ``[g0, g1)``): a fixed-time job with a match inside the
  gap fires once, at the boundary instant (the first real instant after the jump);
* fall back (wall times ``[g1, g0)`` repeat): a fixed-time job skips, in the later segment,
  the wall times that already occurred in the earlier one; other jobs fire at both.

Everything is computed in whole UTC seconds; callers convert to and from milliseconds.
"""

from __future__ import annotations

from bisect import bisect_left
from datetime import date

from schedd.schedule._cronexpr import CronSpec
from schedd.schedule._tz import Segment, segment_at

_DAY = 86_400
_EPOCH_ORD = date(1970, 1, 1).toordinal()
#: Latest wall day we search (9998-12-31); beyond it there are "no more fires".
_LAST_DAY = date(9998, 12, 31).toordinal() - _EPOCH_ORD


class CronEngine:
    """Next-fire and counting over one parsed expression in one zone.

    Instances are immutable in effect: the only state is a cache of recent month lookups,
    of the day choice per month shape and of the current zone segment, so repeated calls
    from an advancing cursor are cheap.
    """

    __slots__ = ("_first_tod", "_months", "_n_tod", "_seg", "_shapes", "_spec", "_tz")

    def __init__(self, spec: CronSpec, tz: str) -> None:
        self._spec = spec
        self._tz = tz
        self._months: dict[tuple[int, int], tuple[int, ...]] = {}
        # The day choice depends only on a month's length and first weekday: at most 28
        # shapes, each computed once (keyed n_days * 7 + first weekday).
        self._shapes: dict[int, tuple[int, ...]] = {}
        self._seg: Segment | None = None
        self._n_tod = len(spec.hours) * len(spec.minutes) * len(spec.seconds)
        self._first_tod = spec.hours[0] * 3600 + spec.minutes[0] * 60 + spec.seconds[0]

    # -- zone segments -------------------------------------------------------------------
    def _segment(self, t: int) -> Segment:
        seg = self._seg
        if seg is None or not seg.start <= t < seg.end:
            seg = self._seg = segment_at(self._tz, t)
        return seg

    def _wall_floor(self, seg: Segment) -> int:
        """First wall second of ``seg`` a fire may use (fixed-time jobs skip repeats)."""
        if self._spec.fixed_time and seg.prev_off > seg.off:
            return seg.start + seg.prev_off
        return seg.start + seg.off

    # -- zone-aware stepping -------------------------------------------------------------
    def next_after(self, c: int) -> int | None:
        """First fire (UTC second) strictly after UTC second ``c``, or None."""
        # Start in the segment holding c itself: if c + 1 opens the next segment, the
        # boundary step below still sees a gap fire at that instant.
        seg = self._segment(c)
        while True:
            w = self.naive_next(max(c + 1 + seg.off, self._wall_floor(seg)))
            if w is None:
                return None
            if w - seg.off < seg.end:
                return w - seg.off
            nxt = self._segment(seg.end)
            if self._gap_fires(seg, nxt):
                return seg.end
            c, seg = seg.end - 1, nxt

    def _gap_fires(self, seg: Segment, nxt: Segment) -> bool:
        """Whether a fixed-time job has a match in the wall-time gap between two segments."""
        if not self._spec.fixed_time or nxt.off <= seg.off:
            return False
        g0, g1 = seg.end + seg.off, seg.end + nxt.off
        w = self.naive_next(g0)
        return w is not None and w < g1

    def count(self, lo: int, hi: int) -> int:
        """Number of fires ``f`` with ``lo <= f < hi`` (UTC seconds), without listing them."""
        total, t = 0, lo
        seg = segment_at(self._tz, t)
        if t == seg.start and self._gap_fire_alone(segment_at(self._tz, t - 1), seg):
            total += 1
        while t < hi:
            end = min(seg.end, hi)
            w0 = max(t + seg.off, self._wall_floor(seg))
            if end + seg.off > w0:
                total += self.naive_count(w0, end + seg.off)
            if end == hi:
                break
            nxt = segment_at(self._tz, seg.end)
            if self._gap_fire_alone(seg, nxt):
                total += 1
            t, seg = seg.end, nxt
        return total

    def _gap_fire_alone(self, seg: Segment, nxt: Segment) -> bool:
        """A gap fire at ``nxt.start`` not merged with a regular match at that instant."""
        return self._gap_fires(seg, nxt) and not self._matches(nxt.start + nxt.off)

    # -- naive wall-clock matching -------------------------------------------------------
    def naive_next(self, w: int) -> int | None:
        """Smallest matching wall second >= ``w``, or None past year 9998."""
        d, tod = divmod(w, _DAY)
        if self._day_ok(d):
            t = self._next_tod(tod)
            if t is not None:
                return d * _DAY + t
        nd = self._next_day(d + 1)
        return None if nd is None else nd * _DAY + self._first_tod

    def _matches(self, w: int) -> bool:
        d, tod = divmod(w, _DAY)
        h, r = divmod(tod, 3600)
        m, s = divmod(r, 60)
        sp = self._spec
        return self._day_ok(d) and h in sp.hours and m in sp.minutes and s in sp.seconds

    def naive_count(self, w0: int, w1: int) -> int:
        """Number of matching wall seconds in ``[w0, w1)``."""
        d0, t0 = divmod(w0, _DAY)
        d1, t1 = divmod(w1, _DAY)
        if d0 == d1:
            return self._tod_below(t1) - self._tod_below(t0) if self._day_ok(d0) else 0
        n = self._n_tod - self._tod_below(t0) if self._day_ok(d0) else 0
        n += self._n_tod * self._days_between(d0 + 1, d1)
        if self._day_ok(d1):
            n += self._tod_below(t1)
        return n

    def _next_tod(self, tod: int) -> int | None:
        """Smallest matching time of day (seconds) >= ``tod``, or None."""
        sp = self._spec
        hs, ms, ss = sp.hours, sp.minutes, sp.seconds
        h, r = divmod(tod, 3600)
        m, s = divmod(r, 60)
        k = bisect_left(hs, h)
        if k < len(hs) and hs[k] == h:
            j = bisect_left(ms, m)
            if j < len(ms) and ms[j] == m:
                i = bisect_left(ss, s)
                if i < len(ss):
                    return h * 3600 + m * 60 + ss[i]
                j += 1
            if j < len(ms):
                return h * 3600 + ms[j] * 60 + ss[0]
            k += 1
        if k < len(hs):
            return hs[k] * 3600 + ms[0] * 60 + ss[0]
        return None

    def _tod_below(self, tod: int) -> int:
        """Number of matching times of day strictly below ``tod``."""
        sp = self._spec
        h, r = divmod(tod, 3600)
        m, s = divmod(r, 60)
        n_m, n_s = len(sp.minutes), len(sp.seconds)
        n = bisect_left(sp.hours, h) * n_m * n_s
        if h in sp.hours:
            n += bisect_left(sp.minutes, m) * n_s
            if m in sp.minutes:
                n += bisect_left(sp.seconds, s)
        return n

    # -- days ----------------------------------------------------------------------------
    def _month_days(self, year: int, month: int) -> tuple[int, ...]:
        """Matching days of one month, ascending (cached; the cache stays small)."""
        key = (year, month)
        days = self._months.get(key)
        if days is None:
            if len(self._months) > 48:
                self._months.clear()
            days = self._months[key] = self._compute_month_days(year, month)
        return days

    def _compute_month_days(self, year: int, month: int) -> tuple[int, ...]:
        sp = self._spec
        if month not in sp.months:
            return ()
        first = date(year, month, 1)
        n_days = ((date(year + month // 12, month % 12 + 1, 1)) - first).days
        wd0 = first.isoweekday() % 7  # 0 = Sunday, as in cron
        key = n_days * 7 + wd0
        days = self._shapes.get(key)
        if days is None:
            days = self._shapes[key] = sp.month_days(n_days, wd0)
        return days

    def _day_ok(self, d: int) -> bool:
        if not 0 <= d <= _LAST_DAY:
            return False
        dt = date.fromordinal(d + _EPOCH_ORD)
        days = self._month_days(dt.year, dt.month)
        i = bisect_left(days, dt.day)
        return i < len(days) and days[i] == dt.day

    def _next_day(self, d: int) -> int | None:
        """Smallest matching day number >= ``d``, or None past the search horizon."""
        d = max(d, 0)
        if d > _LAST_DAY:
            return None
        dt = date.fromordinal(d + _EPOCH_ORD)
        y, m, day = dt.year, dt.month, dt.day
        while y <= 9998:
            days = self._month_days(y, m)
            i = bisect_left(days, day)
            if i < len(days):
                return date(y, m, days[i]).toordinal() - _EPOCH_ORD
            y, m, day = (y + 1, 1, 1) if m == 12 else (y, m + 1, 1)
        return None

    def _days_between(self, d0: int, d1: int) -> int:
        """Number of matching days in ``[d0, d1)``."""
        if d1 <= d0:
            return 0
        a = date.fromordinal(max(d0, 0) + _EPOCH_ORD)
        b = date.fromordinal(min(d1, _LAST_DAY + 1) + _EPOCH_ORD)
        y, m, n = a.year, a.month, 0
        while (y, m) <= (b.year, b.month):
            days = self._month_days(y, m)
            lo = bisect_left(days, a.day) if (y, m) == (a.year, a.month) else 0
            hi = bisect_left(days, b.day) if (y, m) == (b.year, b.month) else len(days)
            n += max(0, hi - lo)
            y, m = (y + 1, 1) if m == 12 else (y, m + 1)
        return n

"""The Schedule type and ``parse_schedule``: cron, ``@every``, ``@at`` and ``@after``."""

from __future__ import annotations

import enum
import functools
from collections.abc import Iterator
from datetime import UTC, datetime

from schedd._errors import InvalidArgument, InvalidSchedule
from schedd.schedule._cron import CronEngine
from schedd.schedule._cronexpr import CronSpec, parse_cron
from schedd.schedule._duration import parse_duration_ms
from schedd.schedule._tz import segment_at, validate_timezone, zone

_MIN_MS = 0  # 1970-01-01T00:00:00Z
_MAX_MS = int(datetime(2101, 1, 1, tzinfo=UTC).timestamp() * 1000)  # end of 2100
_FIVE_YEARS_MS = 5 * 366 * 86_400_000


class ScheduleKind(enum.Enum):
    """What kind of expression a schedule is."""

    CRON = "cron"
    EVERY = "every"
    AT = "at"
    AFTER = "after"


class Schedule:
    """A parsed schedule: immutable, cheap to keep; parse once, advance many times.

    Attributes:
        kind: Which grammar the expression used.
        expr: The expression as given (stripped).
        tz: Canonical IANA zone name.
        fixed_time: Whether Debian cron's fixed-time DST rule applies (see docs/schedules.md).

    All times are ints, UTC milliseconds since the epoch. Cron fires are whole seconds.
    """

    __slots__ = (
        "_anchor_ms",
        "_at_ms",
        "_cron",
        "_interval_ms",
        "expr",
        "fixed_time",
        "kind",
        "tz",
    )

    kind: ScheduleKind
    expr: str
    tz: str
    fixed_time: bool
    _cron: CronEngine | None
    _interval_ms: int
    _anchor_ms: int
    _at_ms: int

    def __init__(
        self,
        kind: ScheduleKind,
        expr: str,
        tz: str,
        *,
        fixed_time: bool = False,
        cron: CronEngine | None = None,
        interval_ms: int = 0,
        anchor_ms: int = 0,
        at_ms: int = 0,
    ) -> None:
        """Internal: use :func:`parse_schedule`."""
        for name, value in (
            ("kind", kind),
            ("expr", expr),
            ("tz", tz),
            ("fixed_time", fixed_time),
            ("_cron", cron),
            ("_interval_ms", interval_ms),
            ("_anchor_ms", anchor_ms),
            ("_at_ms", at_ms),
        ):
            object.__setattr__(self, name, value)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"Schedule is immutable; cannot set {name!r}")

    def __repr__(self) -> str:
        return f"Schedule({self.kind.name}, {self.expr!r}, tz={self.tz!r})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Schedule):
            return NotImplemented
        return self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def _key(self) -> tuple[object, ...]:
        return (self.kind, self.expr, self.tz, self._anchor_ms)

    @property
    def one_shot(self) -> bool:
        """True for AT and AFTER schedules: they fire at most once."""
        return self.kind in (ScheduleKind.AT, ScheduleKind.AFTER)

    def next_fire(self, after_ms: int) -> int | None:
        """The first fire strictly after ``after_ms``; None when there are no more fires.

        Iteration continues from this UTC cursor, never from a local wall time, so a cursor
        inside a repeated (fall-back) hour never yields the fire it already passed again.
        """
        if self._cron is not None:
            s = self._cron.next_after(after_ms // 1000)
            return None if s is None else s * 1000
        if self.kind is ScheduleKind.EVERY:
            k = max(1, (after_ms - self._anchor_ms) // self._interval_ms + 1)
            return self._anchor_ms + k * self._interval_ms
        return self._at_ms if self._at_ms > after_ms else None

    def fires(
        self, after_ms: int, *, until_ms: int | None = None, limit: int | None = None
    ) -> Iterator[int]:
        """Fires strictly after ``after_ms``, ascending.

        Args:
            after_ms: Exclusive lower bound.
            until_ms: Inclusive upper bound; unbounded if None.
            limit: At most this many fires; unbounded if None.
        """
        n, cur = 0, after_ms
        while limit is None or n < limit:
            nxt = self.next_fire(cur)
            if nxt is None or (until_ms is not None and nxt > until_ms):
                return
            yield nxt
            n += 1
            cur = nxt

    def count_fires(self, after_ms: int, until_ms: int) -> int:
        """Number of fires ``f`` with ``after_ms < f <= until_ms``, without listing them.

        Cost grows with the number of local days and zone transitions covered, not with
        the number of fires.
        """
        if until_ms <= after_ms:
            return 0
        if self._cron is not None:
            # Fires are whole seconds: f > after_ms <=> f_s >= after_ms // 1000 + 1.
            return self._cron.count(after_ms // 1000 + 1, until_ms // 1000 + 1)
        if self.kind is ScheduleKind.EVERY:
            a, iv = self._anchor_ms, self._interval_ms
            return max(0, (until_ms - a) // iv) - max(0, (after_ms - a) // iv)
        return 1 if after_ms < self._at_ms <= until_ms else 0


def parse_schedule(expr: str, tz: str = "UTC", *, anchor_ms: int = 0) -> Schedule:
    """Parse and validate a schedule expression.

    Args:
        expr: Cron (5 fields, or 6 with seconds first), a macro (``@daily``...),
            ``@every <duration>``, ``@at <ISO-8601>`` or ``@after <duration>``. ``@every``
            and ``@after`` take an explicit anchor, ``from <ISO-8601 with offset>``
            (milliseconds allowed), which replaces ``anchor_ms``: ``@every 1h from
            2026-01-01T00:05:00Z`` fires at five past every hour whenever the job was
            created (what ``schedctl export`` writes, so a copy keeps the phase).
        tz: IANA zone the cron fields and an offset-less ``@at`` are read in.
        anchor_ms: The job's creation time: ``@every`` fires at ``anchor + k*interval``
            (k >= 1), ``@after`` at ``anchor + delay``; cron uses it as the reference point
            of the "never fires" check.

    Raises:
        InvalidSchedule: field ``schedule.expr`` or ``schedule.timezone``; the message names
            the problem.
    """
    zone_name = validate_timezone(tz)
    text = expr.strip()
    head, _, rest = text.partition(" ")
    head, rest = head.lower(), rest.strip()
    if head == "@every":
        rest, anchor_ms = _anchor(rest, head, anchor_ms)
        iv = _whole_seconds(rest, "@every")
        return Schedule(ScheduleKind.EVERY, text, zone_name, interval_ms=iv, anchor_ms=anchor_ms)
    if head == "@after":
        rest, anchor_ms = _anchor(rest, head, anchor_ms)
        delay = _whole_seconds(rest, "@after")
        at = anchor_ms + delay
        _check_range(at, text)
        return Schedule(ScheduleKind.AFTER, text, zone_name, anchor_ms=anchor_ms, at_ms=at)
    if head == "@at":
        at, fixed = _parse_at(rest, zone_name)
        return Schedule(ScheduleKind.AT, text, zone_name, fixed_time=fixed, at_ms=at)
    spec, engine = _cron_engine(text, zone_name)
    sched = Schedule(ScheduleKind.CRON, text, zone_name, fixed_time=spec.fixed_time, cron=engine)
    first = sched.next_fire(anchor_ms)
    if first is None or first - anchor_ms > _FIVE_YEARS_MS:
        raise InvalidSchedule(
            f"{text!r} never fires: no fire within 5 years of {iso_ms(anchor_ms)}"
        )
    return sched


@functools.lru_cache(maxsize=1024)
def _cron_engine(text: str, zone_name: str) -> tuple[CronSpec, CronEngine]:
    # Parsing costs ~30 us and every job with the same expression and zone shares the result
    # (creation validates, plans the first fire and the owner plans every claim from it). A
    # parse error raises and is not cached.
    spec = parse_cron(text)
    return spec, CronEngine(spec, zone_name)


def _whole_seconds(text: str, what: str) -> int:
    try:
        ms = parse_duration_ms(text, "schedule.expr")
    except InvalidArgument as exc:
        raise InvalidSchedule(f"{what}: {exc.reason}") from exc
    if ms < 1000:
        raise InvalidSchedule(f"{what} {text!r}: must be at least 1s")
    if ms % 1000:
        raise InvalidSchedule(f"{what} {text!r}: finer than one second is not supported")
    return ms


def pin_anchor(expr: str, anchor_ms: int) -> str:
    """``expr`` with its anchor written out, so it fires at the same instants wherever and
    whenever a job is created with it: ``@every 30s`` anchored at ``anchor_ms`` becomes
    ``@every 30s from 2026-03-01T12:00:03.417Z``. Cron, ``@at`` and an expression that has
    a ``from`` already do not depend on the creation time and come back unchanged."""
    text = expr.strip()
    head = text.partition(" ")[0].lower()
    if head not in ("@every", "@after") or " from " in text:
        return expr
    return f"{text} from {iso_ms(anchor_ms)}"


def _anchor(rest: str, head: str, default_ms: int) -> tuple[str, int]:
    """Split ``"<duration> from <ISO>"`` into the duration and the anchor (UTC ms);
    ``(rest, default_ms)`` when there is no ``from``."""
    duration, found, when = rest.partition(" from ")
    if not found:
        return rest, default_ms
    when = when.strip()
    try:
        dt = datetime.fromisoformat(when)
    except ValueError as exc:
        raise InvalidSchedule(
            f"{head} ... from {when!r}: not an ISO-8601 time such as 2026-01-01T00:05:00Z"
        ) from exc
    if dt.tzinfo is None:  # an anchor is an instant; a wall time would move with the zone
        raise InvalidSchedule(f"{head} ... from {when!r}: needs a UTC offset or Z")
    if dt.microsecond % 1000:
        raise InvalidSchedule(f"{head} ... from {when!r}: finer than a millisecond")
    ms = int(dt.timestamp()) * 1000 + dt.microsecond // 1000
    _check_range(ms, f"{head} ... from {when}")
    return duration.strip(), ms


def _check_range(at_ms: int, text: str) -> None:
    if not _MIN_MS <= at_ms < _MAX_MS:
        raise InvalidSchedule(f"{text!r}: {iso_ms(at_ms)} is outside 1970..2100")


def _parse_at(text: str, tz: str) -> tuple[int, bool]:
    """Parse ``@at`` time; returns (UTC ms, whether it was local wall time)."""
    try:
        dt = datetime.fromisoformat(text)
    except ValueError as exc:
        raise InvalidSchedule(
            f"@at {text!r}: not an ISO-8601 time such as 2026-12-24T18:00:00+01:00"
        ) from exc
    if dt.microsecond:
        raise InvalidSchedule(f"@at {text!r}: finer than one second is not supported")
    if not 1970 <= dt.year <= 2100:
        raise InvalidSchedule(f"@at {text!r}: year {dt.year} is outside 1970..2100")
    if dt.tzinfo is not None:
        at = int(dt.timestamp()) * 1000
        _check_range(at, f"@at {text}")
        return at, False
    at = wall_to_utc_s(dt, tz) * 1000
    _check_range(at, f"@at {text}")
    return at, True


def wall_to_utc_s(naive: datetime, tz: str) -> int:
    """UTC second of a local wall time by the fixed-time rule.

    A repeated wall time maps to its first occurrence; a wall time in a gap maps to the first
    instant after the gap.
    """
    z = zone(tz)
    cands = []
    for fold in (0, 1):
        u = int(naive.replace(tzinfo=z, fold=fold).timestamp())
        if datetime.fromtimestamp(u, z).replace(tzinfo=None) == naive:
            cands.append(u)
    if cands:
        return min(cands)
    # In a gap: fold=0 reads it with the earlier (smaller) offset, landing after the jump.
    u = int(naive.replace(tzinfo=z, fold=0).timestamp())
    seg = segment_at(tz, u)
    while seg.prev_off == seg.off:  # skip boundaries that change nothing
        seg = segment_at(tz, seg.start - 1)
    return seg.start


def iso_ms(ms: int) -> str:
    """UTC ISO-8601 text of a ms instant, e.g. ``2025-03-09T07:00:00Z``."""
    dt = datetime.fromtimestamp(ms / 1000, UTC)
    spec = "milliseconds" if ms % 1000 else "seconds"
    return dt.isoformat(timespec=spec).replace("+00:00", "Z")

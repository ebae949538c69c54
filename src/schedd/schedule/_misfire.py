"""What to run after downtime: the misfire policy over the fires a node did not claim."""

from __future__ import annotations

from dataclasses import dataclass

from schedd._errors import InvalidArgument
from schedd.schedule._duration import format_duration_ms
from schedd.schedule._schedule import Schedule, iso_ms

_MODES = ("catch_up", "once", "skip")
_MAX_LISTED = 1000


@dataclass(frozen=True)
class MisfirePlan:
    """The decision for the fires between a job's cursor and now.

    Attributes:
        run: Scheduled fire times to run now, ascending.
        missed: (fire time, human reason) of dropped fires, ascending, at most 1000 listed.
        missed_not_listed: Further dropped fires, counted but not listed.
        next_fire_ms: The first fire strictly after ``now_ms`` (None: no more fires).
    """

    run: list[int]
    missed: list[tuple[int, str]]
    missed_not_listed: int
    next_fire_ms: int | None


def plan_misfires(
    schedule: Schedule,
    *,
    cursor_ms: int,
    now_ms: int,
    mode: str,
    catch_up_limit: int = 10,
    starting_deadline_ms: int = 0,
    grace_ms: int = 1000,
    max_enumerate: int = 100_000,
) -> MisfirePlan:
    """Decide which fires ``f`` with ``cursor_ms < f <= now_ms`` run and which are missed.

    A fire with ``now_ms - f <= grace_ms`` is on time and always runs. Of the late ones,
    those later than ``starting_deadline_ms`` (if > 0) are missed; of the rest, ``catch_up``
    runs the latest ``catch_up_limit``, ``once`` the latest one, ``skip`` none; the others
    are missed with a reason.

    Cost does not grow with the downtime's fire count: fires are counted per local day and
    zone segment, the latest runnable ones found by bisection, and only the run fires and the
    first listed missed ones are enumerated. ``max_enumerate`` caps how many fires any one
    step lists (late runs and on-time runs alike).

    Raises:
        InvalidArgument: field ``misfire.mode`` for an unknown mode.

    Example:
        A per-second job down for a day, ``mode="once"``: ``run`` holds the last late fire
        plus the on-time ones, ``missed`` lists the first 1000 fires and
        ``missed_not_listed`` counts the remaining ~85,000.
    """
    if mode not in _MODES:
        raise InvalidArgument("misfire.mode", f"unknown mode {mode!r}; use one of {_MODES}")
    nxt = schedule.next_fire(max(now_ms, cursor_ms))
    if now_ms <= cursor_ms:
        return MisfirePlan([], [], 0, nxt)
    late_end = max(cursor_ms, now_ms - max(grace_ms, 0) - 1)  # late fires are <= this
    dl_end = cursor_ms  # fires <= this blew the starting deadline
    if starting_deadline_ms > 0:
        dl_end = min(late_end, max(cursor_ms, now_ms - starting_deadline_ms - 1))
    n_dead = schedule.count_fires(cursor_ms, dl_end)
    n_elig = schedule.count_fires(dl_end, late_end)
    want = {"catch_up": max(catch_up_limit, 0), "once": 1, "skip": 0}[mode]
    k = min(want, n_elig, max_enumerate)
    run_late: list[int] = []
    if k:
        start = _last_k_start(schedule, dl_end, late_end, k)
        run_late = list(schedule.fires(start, until_ms=late_end, limit=k))
    n_missed = n_dead + n_elig - len(run_late)
    miss_end = run_late[0] - 1 if run_late else late_end
    limit = min(_MAX_LISTED, max_enumerate, n_missed)
    fires = schedule.fires(cursor_ms, until_ms=miss_end, limit=limit)
    reason = _Reasons(mode, now_ms, dl_end, starting_deadline_ms, catch_up_limit, run_late)
    listed = [(f, reason(f)) for f in fires]
    on_time = list(schedule.fires(late_end, until_ms=now_ms, limit=max_enumerate))
    return MisfirePlan(run_late + on_time, listed, n_missed - len(listed), nxt)


@dataclass(frozen=True)
class _Reasons:
    """The human reason a dropped fire was missed."""

    mode: str
    now_ms: int
    dl_end: int
    deadline_ms: int
    catch_up_limit: int
    run_late: list[int]

    def __call__(self, f: int) -> str:
        if f <= self.dl_end:
            late = format_duration_ms(self.now_ms - f)
            return f"starting deadline {format_duration_ms(self.deadline_ms)} exceeded: {late} late"
        if self.mode == "catch_up":
            return f"catch-up limit {self.catch_up_limit} exceeded"
        if self.mode == "once":
            return f"coalesced into the fire at {iso_ms(self.run_late[-1])}"
        return "misfire policy skip"


def _last_k_start(schedule: Schedule, lo: int, hi: int, k: int) -> int:
    """Largest ``p`` in ``[lo, hi]`` with ``count_fires(p, hi) >= k``; that is exactly k.

    Requires ``count_fires(lo, hi) >= k``. Bisection keeps this O(log span) counts.
    """
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if schedule.count_fires(mid, hi) >= k:
            lo = mid
        else:
            hi = mid - 1
    return lo

"""Schedule math for schedd: pure functions, no I/O, times as UTC epoch milliseconds.

Parse once with :func:`parse_schedule`, then advance from a UTC cursor with
:meth:`Schedule.next_fire`. Cron expressions follow Debian cron's DST rule; see
``docs/schedules.md`` for the grammar and worked DST examples.
"""

from schedd.schedule._duration import format_duration_ms, parse_duration_ms
from schedd.schedule._jitter import jitter_offset_ms, retry_backoff_ms
from schedd.schedule._misfire import MisfirePlan, plan_misfires
from schedd.schedule._schedule import Schedule, ScheduleKind, parse_schedule, pin_anchor
from schedd.schedule._tz import validate_timezone
from schedd.schedule._words import describe_schedule

__all__ = [
    "MisfirePlan",
    "Schedule",
    "ScheduleKind",
    "describe_schedule",
    "format_duration_ms",
    "jitter_offset_ms",
    "parse_duration_ms",
    "parse_schedule",
    "pin_anchor",
    "plan_misfires",
    "retry_backoff_ms",
    "validate_timezone",
]

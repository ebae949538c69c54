"""Cron expression parsing: 5 fields (minute first) or 6 (seconds first), names and macros."""

from __future__ import annotations

from dataclasses import dataclass

from schedd._errors import InvalidSchedule

_MACROS: dict[str, str] = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
_MONTH_NAMES = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
_MONTHS = {m: i + 1 for i, m in enumerate(_MONTH_NAMES)}
_DOWS = {d: i for i, d in enumerate(("sun", "mon", "tue", "wed", "thu", "fri", "sat"))}
#: (name, low, high, names) per field, in 6-field order.
_FIELDS: tuple[tuple[str, int, int, dict[str, int]], ...] = (
    ("second", 0, 59, {}),
    ("minute", 0, 59, {}),
    ("hour", 0, 23, {}),
    ("day-of-month", 1, 31, {}),
    ("month", 1, 12, _MONTHS),
    ("day-of-week", 0, 7, _DOWS),
)
#: Longest month length per month (February 29 exists in leap years).
_MAX_DAYS = (31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)


@dataclass(frozen=True, slots=True)
class CronSpec:
    """The expanded fields of a cron expression.

    ``dom_star``/``dow_star`` record whether the field text starts with ``*``: as in Vixie
    and Debian cron, a day matches if day-of-month *or* day-of-week matches when both are
    restricted, and both must match otherwise. ``dows`` uses 0 = Sunday (7 is folded to 0).
    """

    seconds: tuple[int, ...]
    minutes: tuple[int, ...]
    hours: tuple[int, ...]
    doms: frozenset[int]
    months: frozenset[int]
    dows: frozenset[int]
    dom_star: bool
    dow_star: bool
    fixed_time: bool


def parse_cron(expr: str) -> CronSpec:
    """Parse a cron expression or macro into a :class:`CronSpec`.

    Raises:
        InvalidSchedule: wrong field count, out-of-range or reversed values, step 0, unknown
            names or syntax, ``TZ=``/``CRON_TZ=`` prefixes, dates that never exist.
    """
    text = expr.strip()
    upper = text.upper()
    if upper.startswith(("CRON_TZ=", "TZ=")):
        raise InvalidSchedule(
            f"{text.split('=', 1)[0]}= is not allowed inside the expression; "
            "put the zone in the timezone field instead"
        )
    if text.startswith("@"):
        macro = _MACROS.get(text.lower())
        if macro is None:
            raise InvalidSchedule(
                f"unknown macro {text!r}; expected one of {', '.join(_MACROS)}, "
                "@every <duration>, @at <time>, @after <duration>"
            )
        text = macro
    parts = text.split()
    if len(parts) == 5:
        parts = ["0", *parts]
    elif len(parts) != 6:
        raise InvalidSchedule(
            f"expected 5 fields (minute hour day-of-month month day-of-week) or 6 "
            f"(seconds first), got {len(parts)} in {expr!r}"
        )
    sets = [_parse_field(p, *f) for p, f in zip(parts, _FIELDS, strict=True)]
    dows = frozenset(d % 7 for d in sets[5])
    spec = CronSpec(
        seconds=tuple(sorted(sets[0])),
        minutes=tuple(sorted(sets[1])),
        hours=tuple(sorted(sets[2])),
        doms=frozenset(sets[3]),
        months=frozenset(sets[4]),
        dows=dows,
        dom_star=parts[3].startswith("*"),
        dow_star=parts[5].startswith("*"),
        # Debian cron: a job is fixed-time unless its minute or hour field starts with '*'.
        fixed_time=not (parts[1].startswith("*") or parts[2].startswith("*")),
    )
    _check_dates_exist(spec, expr)
    return spec


def _parse_field(text: str, name: str, lo: int, hi: int, names: dict[str, int]) -> set[int]:
    out: set[int] = set()
    for item in text.split(","):
        if not item:
            raise InvalidSchedule(f"empty list item in {name} field {text!r}")
        rng, _, step_s = item.partition("/")
        step = 1
        if step_s or item.endswith("/"):
            step = _number(step_s, name, names={})
            if step == 0:
                raise InvalidSchedule(f"step 0 in {name} field {text!r}; a step must be >= 1")
        if rng == "*":
            first, last = lo, hi
        elif "-" in rng:
            a, _, b = rng.partition("-")
            first, last = _number(a, name, names), _number(b, name, names)
            if first > last:
                raise InvalidSchedule(f"reversed range {rng} in {name} field; write it low-high")
        else:
            first = _number(rng, name, names)
            last = hi if step_s else first
        for v in (first, last):
            if not lo <= v <= hi:
                raise InvalidSchedule(f"{name} value {v} out of range {lo}-{hi} in {text!r}")
        out.update(range(first, last + 1, step))
    return out


def _number(tok: str, name: str, names: dict[str, int]) -> int:
    if tok.isdigit():
        return int(tok)
    if tok.lower() in names:
        return names[tok.lower()]
    if any(c in tok.upper() for c in "LW#?"):
        raise InvalidSchedule(f"{name} field: {tok!r} (L, W, #, ?) is not supported")
    raise InvalidSchedule(f"{name} field: {tok!r} is not a number or a known name")


def _check_dates_exist(spec: CronSpec, expr: str) -> None:
    """Reject day/month combinations that never occur, e.g. ``0 0 30 2 *``."""
    if not (spec.dom_star or spec.dow_star):
        return  # day-of-week alone matches some day of every month
    if any(d <= _MAX_DAYS[m - 1] for m in spec.months for d in spec.doms):
        return
    raise InvalidSchedule(
        f"{expr!r} never fires: day-of-month {_fmt(spec.doms)} does not occur in "
        f"month {_fmt(spec.months)}"
    )


def _fmt(values: frozenset[int]) -> str:
    return ",".join(str(v) for v in sorted(values))

"""Cron expression parsing: 5 fields (minute first) or 6 (seconds first), names and macros.

Day-of-month also takes ``L``, ``L-n``, ``LW``, ``nW`` and ``?``; day-of-week takes ``nL``,
``n#k`` and ``?`` (see docs/schedules.md for the grammar and the rules).
"""

from __future__ import annotations

from dataclasses import dataclass, field

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
_DOM = "day-of-month"
_DOW = "day-of-week"
#: (name, low, high, names) per field, in 6-field order.
_FIELDS: tuple[tuple[str, int, int, dict[str, int]], ...] = (
    ("second", 0, 59, {}),
    ("minute", 0, 59, {}),
    ("hour", 0, 23, {}),
    (_DOM, 1, 31, {}),
    ("month", 1, 12, _MONTHS),
    (_DOW, 0, 7, _DOWS),
)
#: Longest month length per month (February 29 exists in leap years).
_MAX_DAYS = (31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)
#: Largest n in ``L-n`` (``L-30`` is the 1st of a 31-day month).
_MAX_LAST_OFFSET = 30
#: Largest k in ``n#k``.
_MAX_NTH = 5

_WHY_W = "W takes one day of the month (15W) or LW; not a range, step or offset"
_WHY_L_DOM = (
    f"L takes an optional offset (L, L-3; 0 <= offset <= {_MAX_LAST_OFFSET}); not a range or step"
)
_WHY_NL_DOM = "nL (the last such weekday of the month) belongs in day-of-week, e.g. 5L"
_WHY_HASH_DOM = "# belongs in day-of-week (MON#2 = the second Monday)"
_WHY_L_DOW = (
    "in day-of-week, L follows one weekday: 5L or FRIL is the last Friday; not a range or step"
)
_WHY_L_ALONE = (
    "L alone is ambiguous in day-of-week (Quartz reads it as Saturday): "
    "write 6 or SAT, or 5L for the last Friday"
)
_WHY_L_FIRST = "write the weekday first: 5L or FRIL is the last Friday"
_WHY_HASH = (
    f"# takes one weekday and an occurrence 1..{_MAX_NTH} (MON#2 = the second Monday); "
    "not a range or step"
)
_WHY_W_DOW = "W belongs in day-of-month (15W, LW)"
_WHY_QUESTION = "? stands alone in the field (it means no specific value, like *)"
_WHY_ELSEWHERE = "L, W, # and ? are only allowed in the day-of-month and day-of-week fields"


@dataclass(frozen=True, slots=True)
class CronSpec:
    """The expanded fields of a cron expression.

    ``dom_star``/``dow_star`` record whether the field text starts with ``*`` or is ``?``: as
    in Vixie and Debian cron, a day matches if day-of-month *or* day-of-week matches when both
    are restricted, and both must match otherwise. ``dows`` uses 0 = Sunday (7 is folded to 0).

    The special day terms extend their side of that rule: the day-of-month side is ``doms``
    plus ``dom_last`` (``L-k`` is the k-th day before the last; ``L`` is k = 0), the last
    weekday (``LW``) and the weekday nearest each day in ``dom_nearest`` (``15W``); the
    day-of-week side is ``dows`` plus the last ``w`` of the month for ``w`` in ``dow_last``
    (``5L``) and the k-th ``w`` for ``(w, k)`` in ``dow_nth`` (``1#2``).
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
    dom_last: frozenset[int] = frozenset()
    dom_last_weekday: bool = False
    dom_nearest: frozenset[int] = frozenset()
    dow_last: frozenset[int] = frozenset()
    dow_nth: frozenset[tuple[int, int]] = frozenset()

    @property
    def dom_special(self) -> bool:
        """Whether day-of-month uses ``L``, ``L-n``, ``LW`` or ``nW``."""
        return bool(self.dom_last or self.dom_last_weekday or self.dom_nearest)

    @property
    def dow_special(self) -> bool:
        """Whether day-of-week uses ``nL`` or ``n#k``."""
        return bool(self.dow_last or self.dow_nth)

    def month_days(self, n_days: int, wd0: int) -> tuple[int, ...]:
        """Matching days, ascending, of a month of ``n_days`` days starting on weekday ``wd0``
        (0 = Sunday); the month field is the caller's business."""
        doms, dows = self.dom_days(n_days, wd0), self.dow_days(n_days, wd0)
        days = doms & dows if (self.dom_star or self.dow_star) else doms | dows
        return tuple(sorted(days))

    def dom_days(self, n_days: int, wd0: int) -> set[int]:
        """The day-of-month side: plain days plus ``L``, ``L-k``, ``LW`` and ``nW``."""
        out = {d for d in self.doms if d <= n_days}
        if self.dom_special:
            out.update(n_days - k for k in self.dom_last if n_days - k >= 1)
            if self.dom_last_weekday:
                out.add(nearest_weekday(n_days, n_days, wd0))
            out.update(nearest_weekday(n, n_days, wd0) for n in self.dom_nearest if n <= n_days)
        return out

    def dow_days(self, n_days: int, wd0: int) -> set[int]:
        """The day-of-week side: plain weekdays plus ``wL`` and ``w#k``."""
        out: set[int] = set()
        for w in self.dows:
            out.update(range(1 + (w - wd0) % 7, n_days + 1, 7))
        for w, k in self.dow_nth:
            d = 1 + (w - wd0) % 7 + 7 * (k - 1)
            if d <= n_days:  # a 5th Friday that does not exist simply does not fire
                out.add(d)
        wd_last = (wd0 + n_days - 1) % 7
        out.update(n_days - (wd_last - w) % 7 for w in self.dow_last)
        return out


def nearest_weekday(n: int, n_days: int, wd0: int) -> int:
    """The Monday-to-Friday day nearest day ``n``, without leaving the month (Quartz ``nW``).

    Saturday moves to Friday (to Monday the 3rd for Saturday the 1st); Sunday moves to Monday
    (to Friday for Sunday the last day). ``nearest_weekday(n_days, ...)`` is ``LW``.
    """
    wd = (wd0 + n - 1) % 7
    if wd == 6:
        return n - 1 if n > 1 else n + 2
    if wd == 0:
        return n + 1 if n < n_days else n - 2
    return n


@dataclass(slots=True)
class _DaySpecials:
    """Special day terms collected while parsing the two day fields."""

    dom_last: set[int] = field(default_factory=set)
    dom_last_weekday: bool = False
    dom_nearest: set[int] = field(default_factory=set)
    dow_last: set[int] = field(default_factory=set)
    dow_nth: set[tuple[int, int]] = field(default_factory=set)


def parse_cron(expr: str) -> CronSpec:
    """Parse a cron expression or macro into a :class:`CronSpec`.

    Raises:
        InvalidSchedule: wrong field count, out-of-range or reversed values, step 0, unknown
            names or syntax, special day terms in the wrong field or form, ``TZ=``/``CRON_TZ=``
            prefixes, dates that never exist.
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
    sp = _DaySpecials()
    sets = [_parse_field(p, *f, specials=sp) for p, f in zip(parts, _FIELDS, strict=True)]
    dows = frozenset(d % 7 for d in sets[5])
    spec = CronSpec(
        seconds=tuple(sorted(sets[0])),
        minutes=tuple(sorted(sets[1])),
        hours=tuple(sorted(sets[2])),
        doms=frozenset(sets[3]),
        months=frozenset(sets[4]),
        dows=dows,
        dom_star=parts[3].startswith("*") or parts[3] == "?",
        dow_star=parts[5].startswith("*") or parts[5] == "?",
        # Debian cron: a job is fixed-time unless its minute or hour field starts with '*'.
        fixed_time=not (parts[1].startswith("*") or parts[2].startswith("*")),
        dom_last=frozenset(sp.dom_last),
        dom_last_weekday=sp.dom_last_weekday,
        dom_nearest=frozenset(sp.dom_nearest),
        dow_last=frozenset(w % 7 for w in sp.dow_last),
        dow_nth=frozenset((w % 7, k) for w, k in sp.dow_nth),
    )
    _check_dates_exist(spec, parts, expr)
    return spec


def _parse_field(
    text: str, name: str, lo: int, hi: int, names: dict[str, int], *, specials: _DaySpecials
) -> set[int]:
    day_field = name in (_DOM, _DOW)
    if day_field and text == "?":
        return set(range(lo, hi + 1))
    out: set[int] = set()
    for item in text.split(","):
        if not item:
            raise InvalidSchedule(f"empty list item in {name} field {text!r}")
        if "?" in item and day_field:
            raise _unsupported(name, text, _WHY_QUESTION)
        if name == _DOM and _dom_special(item, specials):
            continue
        if name == _DOW and _dow_special(item, specials):
            continue
        out.update(_parse_item(item, text, name, lo, hi, names))
    return out


def _parse_item(item: str, text: str, name: str, lo: int, hi: int, names: dict[str, int]) -> range:
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
        _check_range(v, name, lo, hi, text)
    return range(first, last + 1, step)


def _dom_special(item: str, sp: _DaySpecials) -> bool:
    """Record a day-of-month ``L``/``L-n``/``LW``/``nW`` term; False for a plain item."""
    u = item.upper()
    if "#" in u:
        raise _unsupported(_DOM, item, _WHY_HASH_DOM)
    if "L" not in u and "W" not in u:
        return False
    if u == "L":
        sp.dom_last.add(0)
    elif u == "LW":
        sp.dom_last_weekday = True
    elif u.startswith("L-") and _is_digits(u[2:]):
        offset = int(u[2:])
        if offset > _MAX_LAST_OFFSET:
            raise _unsupported(_DOM, item, _WHY_L_DOM)
        sp.dom_last.add(offset)
    elif u.endswith("W") and _is_digits(u[:-1]):
        day = int(u[:-1])
        _check_range(day, _DOM, 1, 31, item)
        sp.dom_nearest.add(day)
    elif "W" in u:
        raise _unsupported(_DOM, item, _WHY_W)
    elif u.endswith("L") and _is_digits(u[:-1]):
        raise _unsupported(_DOM, item, _WHY_NL_DOM)
    else:
        raise _unsupported(_DOM, item, _WHY_L_DOM)
    return True


def _dow_special(item: str, sp: _DaySpecials) -> bool:
    """Record a day-of-week ``nL``/``n#k`` term; False for a plain item."""
    u = item.upper()
    if "#" in u:
        day_s, _, nth_s = item.partition("#")
        if not (_is_single(day_s) and _is_digits(nth_s)):
            raise _unsupported(_DOW, item, _WHY_HASH)
        nth = int(nth_s)
        if not 1 <= nth <= _MAX_NTH:
            raise _unsupported(_DOW, item, _WHY_HASH)
        day = _number(day_s, _DOW, _DOWS)
        _check_range(day, _DOW, 0, 7, item)
        sp.dow_nth.add((day, nth))
        return True
    if u == "L":
        raise _unsupported(_DOW, item, _WHY_L_ALONE)
    if u.endswith("L"):
        day_s = item[:-1]
        if not _is_single(day_s):
            raise _unsupported(_DOW, item, _WHY_L_DOW)
        day = _number(day_s, _DOW, _DOWS)
        _check_range(day, _DOW, 0, 7, item)
        sp.dow_last.add(day)
        return True
    if u.startswith("L"):
        raise _unsupported(_DOW, item, _WHY_L_FIRST)
    return False


def _is_digits(tok: str) -> bool:
    return tok.isascii() and tok.isdigit()


def _is_single(tok: str) -> bool:
    """One weekday: a number or a name (no range, step or star)."""
    return _is_digits(tok) or tok.lower() in _DOWS


def _number(tok: str, name: str, names: dict[str, int]) -> int:
    if _is_digits(tok):
        return int(tok)
    if tok.lower() in names:
        return names[tok.lower()]
    if any(c in tok.upper() for c in "LW#?"):
        why = _WHY_W_DOW if name == _DOW and "W" in tok.upper() else _WHY_ELSEWHERE
        raise _unsupported(name, tok, why)
    raise InvalidSchedule(f"{name} field: {tok!r} is not a number or a known name")


def _check_range(v: int, name: str, lo: int, hi: int, text: str) -> None:
    if not lo <= v <= hi:
        raise InvalidSchedule(f"{name} value {v} out of range {lo}-{hi} in {text!r}")


def _unsupported(name: str, tok: str, why: str) -> InvalidSchedule:
    return InvalidSchedule(f"{name} {tok!r} is not supported: {why}")


def _check_dates_exist(spec: CronSpec, parts: list[str], expr: str) -> None:
    """Reject day/month combinations that never occur, e.g. ``0 0 30 2 *``, ``0 0 31W 4 *``
    or ``0 0 LW * */7`` (both must match: the last weekday is never a Sunday).

    The day choice depends only on the month's length and first weekday, and every length
    a month can have occurs with every first weekday (within 28 years), so trying those
    shapes decides whether the expression ever fires.
    """
    lengths = {n for m in spec.months for n in ((28, 29) if m == 2 else (_MAX_DAYS[m - 1],))}
    shapes = [(n, wd0) for n in sorted(lengths) for wd0 in range(7)]
    if any(spec.month_days(n, wd0) for n, wd0 in shapes):
        return
    if not any(spec.dom_days(n, wd0) for n, wd0 in shapes):
        raise InvalidSchedule(
            f"{expr!r} never fires: day-of-month {parts[3]} does not occur in "
            f"month {_fmt(spec.months)}"
        )
    raise InvalidSchedule(
        f"{expr!r} never fires: no day in month {parts[4]} is both day-of-month {parts[3]} "
        f"and day-of-week {parts[5]} (when either field starts with * or is ?, both must match)"
    )


def _fmt(values: frozenset[int]) -> str:
    return ",".join(str(v) for v in sorted(values))

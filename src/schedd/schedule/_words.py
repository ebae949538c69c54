"""A schedule in words, for people: ``at 09:00 on weekdays, Europe/Berlin``.

Covers the shapes people write (fixed times on some days, every N seconds, minutes or
hours, the ``@`` forms); anything else is shown as the expression itself, never guessed.
"""

from __future__ import annotations

_DAYS = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"]
_DAY_NAMES = {d.lower(): n for n, d in enumerate(_DAYS)}
_MONTHS = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]
_MONTH_NAMES = {m.lower(): n + 1 for n, m in enumerate(_MONTHS)}
_MACROS = {
    "@yearly": "every year on 1 Jan at 00:00",
    "@annually": "every year on 1 Jan at 00:00",
    "@monthly": "every month on day 1 at 00:00",
    "@weekly": "every Sunday at 00:00",
    "@daily": "every day at 00:00",
    "@midnight": "every day at 00:00",
    "@hourly": "every hour at :00",
}


def describe_schedule(expr: str, tz: str = "") -> str:
    """``expr`` (as stored, valid) in words; cron forms end with their zone."""
    text = " ".join(expr.split())
    zone = tz or "UTC"
    head, _, rest = text.partition(" ")
    if head == "@every":
        return f"every {rest}"
    if head == "@after":
        return f"once, {rest} after it was created"
    if head == "@at":
        return f"once, at {rest}"
    if text.lower() in _MACROS:
        return f"{_MACROS[text.lower()]}, {zone}"
    words = _cron_words(text.split())
    return f"{words}, {zone}" if words else f"cron {text}, {zone}"


def _cron_words(fields: list[str]) -> str | None:
    if len(fields) == 5:
        fields = ["0", *fields]
    if len(fields) != 6:
        return None
    sec, minute, hour, dom, month, dow = fields
    days = _days(dom, month, dow)
    if days is None:
        return None
    step = _every(sec, minute, hour)
    if step is not None:
        return step if days == "every day" else f"{step}, {days}"
    if all(_num(f) is not None for f in (sec, minute, hour)):
        at = f"{int(hour):02d}:{int(minute):02d}" + (f":{int(sec):02d}" if int(sec) else "")
        return f"at {at} {days}" if days != "every day" else f"at {at} every day"
    if hour == "*" and _num(minute) is not None and _num(sec) is not None:
        mark = f":{int(minute):02d}" + (f":{int(sec):02d}" if int(sec) else "")
        return f"every hour at {mark}" + ("" if days == "every day" else f", {days}")
    return None


def _every(sec: str, minute: str, hour: str) -> str | None:
    """``every 5 seconds`` / ``every 15 minutes`` / ``every 2 hours at :30``, or None."""
    if (sec, minute, hour) == ("*", "*", "*"):
        return "every second"
    n = _step(sec)
    if n is not None and (minute, hour) == ("*", "*"):
        return f"every {n} seconds"
    if sec == "0" and (minute, hour) == ("*", "*"):
        return "every minute"
    n = _step(minute)
    if n is not None and sec == "0" and hour == "*":
        return f"every {n} minutes"
    n = _step(hour)
    if n is not None and sec == "0" and _num(minute) is not None:
        return f"every {n} hours at :{int(minute):02d}"
    return None


def _days(dom: str, month: str, dow: str) -> str | None:
    if dom not in ("*", "?") and dow not in ("*", "?"):
        return None  # either one matches (cron's rule): no short phrase says that plainly
    parts: list[str] = []
    if dow not in ("*", "?"):
        named = _weekdays(dow)
        if named is None:
            return None
        parts.append(named)
    if dom not in ("*", "?"):
        if _num(dom) is None:
            return None
        parts.append(f"on day {int(dom)} of the month")
    if month != "*":
        m = _num(month) or _MONTH_NAMES.get(month.lower())
        if m is None or not 1 <= m <= 12:
            return None
        parts.append(f"in {_MONTHS[m - 1]}")
    return " ".join(parts) if parts else "every day"


def _weekdays(dow: str) -> str | None:
    days: set[int] = set()
    for item in dow.split(","):
        lo, _, hi = item.partition("-")
        a, b = _day(lo), _day(hi) if hi else _day(lo)
        if a is None or b is None or b < a:
            return None
        days.update(range(a, b + 1))
    days = {d % 7 for d in days}  # 7 is Sunday too
    if days == {1, 2, 3, 4, 5}:
        return "on weekdays"
    if days == {0, 6}:
        return "on weekends"
    order = sorted(days, key=lambda d: (d + 6) % 7)  # Monday first
    if len(order) == 1:
        return f"on {_DAYS[order[0]]}"
    contiguous = all((order[i + 1] - order[i]) % 7 == 1 for i in range(len(order) - 1))
    if contiguous and len(order) > 2:
        return f"on {_DAYS[order[0]]} to {_DAYS[order[-1]]}"
    return "on " + ", ".join(_DAYS[d] for d in order)


def _day(tok: str) -> int | None:
    n = _num(tok)
    if n is not None:
        return n if 0 <= n <= 7 else None
    return _DAY_NAMES.get(tok.lower()[:3])


def _step(field: str) -> int | None:
    if field.startswith("*/") and field[2:].isdigit():
        return int(field[2:])
    return None


def _num(tok: str) -> int | None:
    return int(tok) if tok.isdigit() else None

"""Durations as text: ``"90s"``, ``"1h30m"``, ``"250ms"``, ``"2d"``; a bare number means seconds."""

from __future__ import annotations

import re

from schedd._errors import InvalidArgument

#: Unit -> milliseconds, largest first: the order components must appear in.
_UNITS: dict[str, int] = {"d": 86_400_000, "h": 3_600_000, "m": 60_000, "s": 1000, "ms": 1}
_COMPONENT = re.compile(r"(\d+)(ms|d|h|m|s)")
#: Anything longer is surely a typo; it also keeps the ints small for storage.
_MAX_MS = 100 * 365 * 86_400_000


def parse_duration_ms(text: str, field: str = "duration") -> int:
    """Parse a duration into milliseconds.

    Accepts components with units ``d``, ``h``, ``m``, ``s``, ``ms``, largest first, each unit
    at most once (``"1h30m"``, ``"1m30s500ms"``); a bare integer means seconds (``"500"`` is
    500 s). Surrounding whitespace is ignored.

    Args:
        text: The duration text.
        field: Dotted field name reported in the error.

    Returns:
        The duration in milliseconds (>= 0, at most 100 years).

    Raises:
        InvalidArgument: ``field`` names the field; the message says what is wrong.
    """
    s = text.strip()
    if not s:
        raise InvalidArgument(field, "empty duration; expected e.g. '90s', '1h30m', '250ms'")
    if s.isdigit():
        return _checked(int(s) * 1000, text, field)
    total, pos, last_rank = 0, 0, -1
    ranks = list(_UNITS)
    while pos < len(s):
        m = _COMPONENT.match(s, pos)
        if m is None:
            raise InvalidArgument(
                field, f"bad duration {text!r}: expected components like '1h30m', '90s', '250ms'"
            )
        rank = ranks.index(m.group(2))
        if rank <= last_rank:
            raise InvalidArgument(
                field, f"bad duration {text!r}: units must appear once each, largest first"
            )
        last_rank = rank
        total += int(m.group(1)) * _UNITS[m.group(2)]
        pos = m.end()
    return _checked(total, text, field)


def _checked(ms: int, text: str, field: str) -> int:
    if ms > _MAX_MS:
        raise InvalidArgument(field, f"duration {text!r} is longer than 100 years")
    return ms


def format_duration_ms(ms: int) -> str:
    """Format milliseconds as the shortest duration text ``parse_duration_ms`` reads back.

    Examples: ``5400000 -> "1h30m"``, ``250 -> "250ms"``, ``0 -> "0s"``. Negative values get a
    leading ``-`` (for messages only; they do not parse).
    """
    if ms < 0:
        return "-" + format_duration_ms(-ms)
    if ms == 0:
        return "0s"
    parts: list[str] = []
    rest = ms
    for unit, size in _UNITS.items():
        n, rest = divmod(rest, size)
        if n:
            parts.append(f"{n}{unit}")
    return "".join(parts)

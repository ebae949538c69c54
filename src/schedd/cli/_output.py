"""schedctl output: tables through rich, or data as json, jsonl or yaml, always on stdout."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

import yaml
from rich.console import Console
from rich.table import Table

FORMATS = ("table", "json", "jsonl", "yaml")


def console() -> Console:
    """A console on the current stdout; wide when not a terminal so tables do not wrap."""
    out = sys.stdout
    width = None if out.isatty() else 200
    return Console(file=out, width=width, soft_wrap=False, highlight=False)


def local_time(ms: int, now_ms: int | None = None) -> str:
    """``ms`` in this machine's time zone, named, with a relative hint:
    ``2026-03-08 08:00:00 CET (in 2h)`` (a table never shows a time without its zone)."""
    if not ms:
        return "-"
    when = datetime.fromtimestamp(ms / 1000).astimezone()
    zone = when.tzname() or when.strftime("%z")
    return f"{when:%Y-%m-%d %H:%M:%S} {zone} ({relative(ms, now_ms)})"


def relative(ms: int, now_ms: int | None = None) -> str:
    """``"in 2h 5m"`` or ``"3m 10s ago"``: the two largest units of the distance to now."""
    now = int(time.time() * 1000) if now_ms is None else now_ms
    delta = (ms - now) // 1000
    seconds = abs(delta)
    parts: list[str] = []
    for unit, size in (("d", 86_400), ("h", 3_600), ("m", 60), ("s", 1)):
        if seconds >= size or (unit == "s" and not parts):
            parts.append(f"{seconds // size}{unit}")
            seconds %= size
        if len(parts) == 2:
            break
    text = " ".join(parts)
    return f"in {text}" if delta > 0 else ("now" if delta == 0 else f"{text} ago")


def emit(
    fmt: str,
    data: Any,
    table: Callable[[], Table] | None = None,
) -> None:
    """Print ``data`` (a dict or a list of dicts) in ``fmt``; ``table`` builds the table view.

    ``jsonl`` prints one compact JSON value per line: one per item for a list.
    """
    out = sys.stdout
    if fmt == "json":
        out.write(json.dumps(data, indent=2, ensure_ascii=False, default=str) + "\n")
    elif fmt == "jsonl":
        items = data if isinstance(data, list) else [data]
        for item in items:
            out.write(json.dumps(item, ensure_ascii=False, default=str) + "\n")
    elif fmt == "yaml":
        out.write(yaml.safe_dump(data, sort_keys=False, allow_unicode=True))
    elif table is not None:
        console().print(table())
    else:
        console().print(key_value_table(data))
    out.flush()


def emit_list(
    fmt: str,
    key: str,
    rows: list[dict[str, Any]],
    table: Callable[[], Table],
    extra: dict[str, Any] | None = None,
) -> None:
    """A listing, one shape for every list: ``{key: rows, ...extra}`` as json or yaml (so a
    script reads ``.jobs``, ``.executions``, ``.tokens`` ... alike), one row per line as
    jsonl, else ``table``."""
    if fmt in ("json", "yaml"):
        emit(fmt, {key: rows, **(extra or {})})
    else:
        emit(fmt, rows, table)


def key_value_table(data: dict[str, Any]) -> Table:
    """A two-column table of a flat or nested dict (nested values shown as JSON)."""
    table = Table(show_header=False, box=None, pad_edge=False)
    table.add_column("field", style="bold")
    table.add_column("value", overflow="fold")
    for key, value in data.items():
        shown = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
        table.add_row(key, shown)
    return table


def rows_table(
    columns: Sequence[str], rows: Sequence[Sequence[Any]], title: str | None = None
) -> Table:
    """A table with a header row; cells are shown with ``str``."""
    table = Table(title=title, header_style="bold")
    for col in columns:
        table.add_column(col, overflow="fold")
    for row in rows:
        table.add_row(*("-" if cell in (None, "") else str(cell) for cell in row))
    return table

"""``schedctl preview``: the next fires of a schedule, computed offline."""

from __future__ import annotations

import time
from typing import Any

import click

from schedd._errors import InvalidArgument
from schedd.cli._context import output_option, settings
from schedd.cli._output import emit, relative, rows_table
from schedd.client import dst_notes, fire_list, parse_time_ms


def preview_fires(expr: str, tz: str, after_ms: int, count: int) -> dict[str, Any]:
    """The preview document: ``{"schedule", "tz", "fires": [{"utc", "local"}, ...]}``.

    Raises:
        InvalidArgument: The expression or the time zone cannot be used.
    """
    from schedd.schedule import validate_timezone

    zone_name = validate_timezone(tz)
    fires = fire_list(expr, zone_name, anchor_ms=after_ms, after_ms=after_ms, count=count)
    return {"schedule": expr, "tz": zone_name, "fires": fires}


@click.command("preview")
@click.argument("schedule")
@click.option("--tz", default="UTC", show_default=True, help="IANA time zone.")
@click.option("--after", help="Start from this ISO-8601 time (default: now).")
@click.option("--count", "-n", type=int, default=10, show_default=True)
@output_option
def preview(schedule: str, tz: str, after: str | None, count: int) -> None:
    """Show the next fires of SCHEDULE, offline (no server needed)."""
    if count < 1:
        raise click.BadParameter("must be at least 1", param_hint="--count")
    now_ms = int(time.time() * 1000)
    after_ms = now_ms if after is None else parse_time_ms(after, "--after")
    try:
        doc = preview_fires(schedule, tz, after_ms, count)
    except InvalidArgument as exc:
        raise click.BadParameter(exc.reason, param_hint=_hint(exc.field)) from exc
    notes = dst_notes([fire["ms"] for fire in doc["fires"]], doc["tz"], after_ms)
    rows = [
        (i + 1, fire["local"], fire["utc"], relative(fire["ms"], now_ms), note)
        for i, (fire, note) in enumerate(zip(doc["fires"], notes, strict=True))
    ]
    for fire, note in zip(doc["fires"], notes, strict=True):
        del fire["ms"]
        fire["note"] = note
    title = f"{schedule} [{doc['tz']}]"
    emit(
        settings().output,
        doc,
        lambda: rows_table(("#", f"LOCAL ({doc['tz']})", "UTC", "WHEN", "NOTE"), rows, title=title),
    )


def _hint(field: str) -> str:
    if field.endswith("timezone"):
        return "--tz"
    return "SCHEDULE"

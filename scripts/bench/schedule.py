"""Benchmark: microseconds per next fire, schedd vs croniter vs cronsim, America/New_York.

Run: ``.venv/bin/python scripts/bench/schedule.py``. Each implementation iterates 10,000
consecutive fires of each expression from 2025-01-01 (a fresh parse per expression, so zone
caches warm inside the timing, as on a fresh node). Table to stderr; last stdout line is JSON.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from datetime import datetime
from zoneinfo import ZoneInfo

from croniter import croniter
from cronsim import CronSim

from schedd.schedule import parse_schedule

TZ = "America/New_York"
N = 10_000
EXPRS = [
    "* * * * * *",
    "*/5 * * * *",
    "0 9 * * 1-5",
    "30 2 * * *",
    "0 */2 * * *",
    "@hourly",
    "0 0 1 * *",
    "15,45 8-18 * * *",
]
START = datetime(2025, 1, 1, tzinfo=ZoneInfo(TZ))


def _ours(expr: str) -> float:
    t = time.perf_counter()
    s = parse_schedule(expr, TZ)
    cur = int(START.timestamp() * 1000)
    for _ in range(N):
        nxt = s.next_fire(cur)
        assert nxt is not None
        cur = nxt
    return time.perf_counter() - t


def _croniter(expr: str) -> float:
    t = time.perf_counter()
    it = croniter(expr, START, second_at_beginning=len(expr.split()) == 6)
    for _ in range(N):
        it.get_next(datetime)
    return time.perf_counter() - t


def _cronsim(expr: str) -> float:
    # cronsim takes 6-field expressions seconds-last; rotate ours (seconds first).
    parts = {"@hourly": "0 * * * *"}.get(expr, expr).split()
    text = " ".join(parts[1:] + parts[:1] if len(parts) == 6 else parts)
    t = time.perf_counter()
    it = CronSim(text, START)
    for _ in range(N):
        next(it)
    return time.perf_counter() - t


IMPLS: dict[str, Callable[[str], float]] = {
    "schedd": _ours,
    "croniter": _croniter,
    "cronsim": _cronsim,
}


def main() -> None:
    results = []
    ratios: dict[str, dict[str, float]] = {}
    print(f"{'expr':<20}{'schedd':>10}{'croniter':>10}{'cronsim':>10}   us/fire", file=sys.stderr)
    for expr in EXPRS:
        row = {name: fn(expr) / N * 1e6 for name, fn in IMPLS.items()}
        for name, us in row.items():
            results.append({"expr": expr, "impl": name, "us_per_fire": round(us, 2)})
        ratios[expr] = {
            "croniter_over_schedd": round(row["croniter"] / row["schedd"], 1),
            "cronsim_over_schedd": round(row["cronsim"] / row["schedd"], 1),
        }
        cells = "".join(f"{row[n]:>10.2f}" for n in IMPLS)
        print(f"{expr:<20}{cells}", file=sys.stderr)
    print(json.dumps({"bench": "schedule", "results": results, "ratios": ratios}))


if __name__ == "__main__":
    main()

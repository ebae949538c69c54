"""What both sides of the e2e benchmark share: workloads, result rows, lateness statistics."""

from __future__ import annotations

import math
import sys
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True)
class Workload:
    """One load shape.

    Attributes:
        name: the result's ``workload`` field (``burst10k``, ``spread10k``, ``sustained2k`` ...).
        kind: ``burst`` (all n one-shot jobs due at the same second T), ``spread`` (n one-shot
            jobs due over ``spread_s`` seconds from T, n / spread_s in each second, each at its
            own millisecond inside its second) or ``sustained`` (n per-second jobs, so n
            fires/s, each fire at its own millisecond inside its second, measured over
            ``duration_s`` seconds).
        n: jobs.
        spread_s: the spread's length in seconds.
        duration_s: the sustained measurement window in seconds.
        jitter_ms: spread and sustained jobs carry this jitter: schedd moves each fire by the
            job's deterministic offset in ``[0, jitter_ms)`` (``schedd.schedule.
            jitter_offset_ms``), which spreads one second's fires over that second, as a user
            spreads a herd; APScheduler gets the same offsets as exact run times. Lateness
            counts from the offset instant, the moment each system was asked to fire.
        factor: ``overload`` only: the offered load during its window as a multiple of the
            capacity measured by the ``capacity`` workload of the same run (``_e2e_overload``).
    """

    name: str
    kind: str
    n: int
    spread_s: float = 0.0
    duration_s: int = 0
    jitter_ms: int = 0
    factor: float = 0.0

    @property
    def expected(self) -> int:
        """Executions the workload should produce inside its measurement window."""
        return self.n * self.duration_s if self.kind == "sustained" else self.n


#: Spread and sustained fires are spread over each second by a one-second jitter.
SPREAD_JITTER_MS = 1000


def _k(n: int) -> str:
    return f"{n // 1000}k" if n % 1000 == 0 and n >= 1000 else str(n)


def workloads(names: Sequence[str], quick: bool) -> list[Workload]:
    """The workloads for ``--workloads`` names; ``quick`` shrinks sizes for a smoke test."""
    burst = {"burst1k": 1000, "burst10k": 10_000, "burst100k": 100_000}
    quick_burst = {"burst1k": 200, "burst10k": 1000, "burst100k": 5000}
    out: list[Workload] = []
    for name in names:
        if name in burst:
            out.append(Workload(name, "burst", (quick_burst if quick else burst)[name]))
        elif name == "spread10k":
            n, secs = (2000, 2.0) if quick else (10_000, 10.0)
            out.append(Workload(name, "spread", n, spread_s=secs, jitter_ms=SPREAD_JITTER_MS))
        elif name == "sustained":
            rates, secs = ((200, 500), 5) if quick else ((1000, 2000, 5000, 7000), 15)
            out.extend(
                Workload(
                    f"sustained{_k(r)}", "sustained", r, duration_s=secs, jitter_ms=SPREAD_JITTER_MS
                )
                for r in rates
            )
        elif name == "overload":
            probe, probe_s, window_s = (10_000, 20, 10) if quick else (20_000, 40, 30)
            out.append(Workload("capacity", "capacity", probe, duration_s=probe_s))
            out.extend(
                Workload(f"overload{k}x", "overload", 0, duration_s=window_s, factor=float(k))
                for k in ("1.5", "3")
            )
        elif name == "tenants":
            out.append(Workload(name, "tenants", 0))
        elif name.startswith("sustained") and name[9:-1].isdigit() and name.endswith("k"):
            rate, secs = int(name[9:-1]) * 1000, 5 if quick else 15
            out.append(
                Workload(name, "sustained", rate, duration_s=secs, jitter_ms=SPREAD_JITTER_MS)
            )
        else:
            raise SystemExit(f"unknown workload {name!r}")
    return out


@dataclass
class Result:
    """One row of the JSON output; fields that do not apply stay None."""

    system: str
    workload: str
    n: int
    p50_ms: float | None = None
    p99_ms: float | None = None
    max_ms: float | None = None
    fires_per_s: float | None = None
    lost: int | None = None
    etcd_txns_per_exec: float | None = None
    etcd_writes_per_exec: float | None = None
    #: What the store wrote per fire (etcd or the embedded store): keys created, changed or
    #: deleted, and write-ahead-log bytes.
    store_keys_per_fire: float | None = None
    store_bytes_per_fire: float | None = None
    durable_s: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    error: str | None = None

    def as_json(self) -> dict[str, Any]:
        out = asdict(self)
        extra = out.pop("extra")
        out.update(extra)
        if out["error"] is None:
            out.pop("error")
        return out


def spread_offset_ms(i: int, n: int, spread_s: float) -> float:
    """The whole second after T in which job ``i`` of a spread fires (n / spread_s per second).

    ``@at`` takes whole seconds; the jitter (:attr:`Workload.jitter_ms`) then places each job at
    its own millisecond inside that second.
    """
    per_s = math.ceil(n / spread_s)
    return float((i // per_s) * 1000)


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile of an ascending sequence (q in [0, 100])."""
    if not sorted_values:
        return math.nan
    rank = max(1, math.ceil(q / 100.0 * len(sorted_values)))
    return sorted_values[min(rank, len(sorted_values)) - 1]


def lateness_stats(lateness_ms: Iterable[float]) -> dict[str, float | None]:
    """p50, p99 and max of a lateness sample, rounded to 0.1 ms (None when empty)."""
    values = sorted(lateness_ms)
    if not values:
        return {"p50_ms": None, "p99_ms": None, "max_ms": None}
    return {
        "p50_ms": round(percentile(values, 50), 1),
        "p99_ms": round(percentile(values, 99), 1),
        "max_ms": round(values[-1], 1),
    }


def fires_per_s(
    starts_ms: Sequence[float],
    first_scheduled_ms: float,
    kind: str,
    n: int,
    duration_s: float = 0.0,
) -> float | None:
    """Executions started per second over the workload's period.

    Burst and spread: count over (last start - first scheduled instant), so a burst's figure is
    the rate at which it drained. Sustained: count over the measurement window.
    """
    if not starts_ms:
        return None
    if kind == "sustained":
        return round(len(starts_ms) / duration_s, 1)
    span_s = max(max(starts_ms) - first_scheduled_ms, 1.0) / 1000.0
    return round(len(starts_ms) / span_s, 1)


def say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


_COLUMNS = (
    ("system", 12, "{}"),
    ("workload", 12, "{}"),
    ("n", 7, "{}"),
    ("p50_ms", 9, "{:.1f}"),
    ("p99_ms", 9, "{:.1f}"),
    ("max_ms", 9, "{:.1f}"),
    ("fires_per_s", 10, "{:.0f}"),
    ("lost", 7, "{}"),
    ("etcd_txns_per_exec", 9, "{:.2f}"),
    ("etcd_writes_per_exec", 9, "{:.2f}"),
    ("store_keys_per_fire", 9, "{:.2f}"),
    ("store_bytes_per_fire", 9, "{:.0f}"),
    ("durable_s", 8, "{:.2f}"),
    ("total_cpu_us_per_fire", 8, "{:.0f}"),
)
_HEADS = (
    "system",
    "workload",
    "n",
    "p50 ms",
    "p99 ms",
    "max ms",
    "fires/s",
    "lost",
    "txn/exec",
    "wr/exec",
    "keys/fire",
    "B/fire",
    "durable s",
    "cpu us",
)


def table_header() -> str:
    return " ".join(h.rjust(w) for h, (_, w, _) in zip(_HEADS, _COLUMNS, strict=True))


def table_row(r: Result) -> str:
    row = r.as_json()
    cells = []
    for key, width, fmt in _COLUMNS:
        value = row.get(key)
        cells.append(("-" if value is None else fmt.format(value)).rjust(width))
    line = " ".join(cells)
    if r.error:
        line += f"   ERROR: {r.error}"
    return line

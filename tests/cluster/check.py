"""What must hold afterwards, read from the effect ledger (:mod:`cluster.effects`).

* every expected fire (each second of each job, from its first fire to the end) has exactly
  one accepted effect — a second accepted write is a doubled effect, unless the worker that
  made the first one was SIGKILLed right after it (before it could report the result: the
  one window the fenced sink cannot close, and the reason handlers are idempotent);
* no handler started before its scheduled time;
* attempts of one execution carry strictly increasing fencing tokens, in start order;
* writes with a stale token were refused (counted, for the report).
"""

from __future__ import annotations

import itertools
import statistics
from collections import defaultdict
from dataclasses import dataclass, field

from cluster.effects import Attempt, EffectLedger, Write


@dataclass
class Report:
    fires_checked: int = 0
    lost: list[tuple[str, int]] = field(default_factory=list)
    doubled: list[str] = field(default_factory=list)  # each with its writes and attempts
    rerun_after_kill: int = 0
    early: list[Attempt] = field(default_factory=list)
    token_order: list[str] = field(default_factory=list)
    stale_refused: int = 0
    attempts: int = 0
    lateness_ms: list[int] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not (self.lost or self.doubled or self.early or self.token_order)

    def summary(self, label: str, **extra: object) -> str:
        late = sorted(self.lateness_ms) or [0]
        p99 = late[min(len(late) - 1, int(len(late) * 0.99))]
        parts = [
            f"{label}: fires checked {self.fires_checked}",
            f"lost {len(self.lost)}",
            f"doubled {len(self.doubled)}",
            f"early {len(self.early)}",
            f"token order violations {len(self.token_order)}",
            f"stale writes refused {self.stale_refused}",
            f"re-run after a worker kill {self.rerun_after_kill}",
            f"attempts {self.attempts}",
            f"lateness p50 {statistics.median(late):.0f} ms p99 {p99} ms max {late[-1]} ms",
            *(f"{k} {v}" for k, v in extra.items()),
        ]
        return ", ".join(parts)

    def failure(self) -> str:
        return (
            f"lost (first 10): {self.lost[:10]}\ndoubled: {self.doubled[:10]}\n"
            f"early: {self.early[:5]}\ntoken order: {self.token_order[:5]}"
        )


def expected_fires(
    first: dict[str, int], end_ms: int, period_ms: int = 1000
) -> set[tuple[str, int]]:
    return {(job, t) for job, start in first.items() for t in range(start, end_ms + 1, period_ms)}


def first_fires(ledger: EffectLedger, jobs: list[str]) -> dict[str, int]:
    """The first scheduled time each job ran (missing jobs are absent)."""
    first: dict[str, int] = {}
    for a in ledger.attempts():
        if a.job_id in jobs and (a.job_id not in first or a.scheduled_ms < first[a.job_id]):
            first[a.job_id] = a.scheduled_ms
    return first


def missing(ledger: EffectLedger, expected: set[tuple[str, int]]) -> set[tuple[str, int]]:
    done = {(w.job_id, w.scheduled_ms) for w in ledger.writes() if w.accepted}
    return expected - done


def verify(
    ledger: EffectLedger,
    expected: set[tuple[str, int]],
    worker_kills: list[tuple[str, float]] = (),  # type: ignore[assignment]
) -> Report:
    attempts, writes = ledger.attempts(), ledger.writes()
    report = Report(fires_checked=len(expected), attempts=len(attempts))
    accepted: dict[tuple[str, int], list[Write]] = defaultdict(list)
    for w in writes:
        if w.accepted:
            accepted[(w.job_id, w.scheduled_ms)].append(w)
        else:
            report.stale_refused += 1
    for key in sorted(expected):
        _count(report, key, accepted.get(key, []), worker_kills)
    if report.doubled:
        report.doubled = [_explain(d, writes, attempts) for d in report.doubled]
    by_execution: dict[str, list[Attempt]] = defaultdict(list)
    for a in attempts:
        if (a.job_id, a.scheduled_ms) in expected:
            by_execution[a.execution_id].append(a)
        if a.started_ms < a.scheduled_ms:
            report.early.append(a)
    for execution, runs in by_execution.items():
        tokens = [a.token for a in runs]  # attempts() is in start order
        if any(b <= a for a, b in itertools.pairwise(tokens)):
            seen = ", ".join(
                f"{a.token}@{a.worker}+{a.started_ms - a.scheduled_ms}ms" for a in runs
            )
            report.token_order.append(f"{execution}: {seen}")
        report.lateness_ms.append(runs[0].started_ms - runs[0].scheduled_ms)
    return report


def _count(
    report: Report, key: tuple[str, int], got: list[Write], kills: list[tuple[str, float]]
) -> None:
    if not got:
        report.lost.append(key)
    elif len(got) > 1:
        if _killed_after(got[0], kills):
            report.rerun_after_kill += 1
        else:
            report.doubled.append(f"{key[0]}@{key[1]}")


def _explain(key: str, writes: list[Write], attempts: list[Attempt]) -> str:
    """``key`` with every write and attempt of it: tokens, workers, times after the fire."""
    job_id, scheduled = key.rsplit("@", 1)
    t = int(scheduled)
    ws = [
        f"{w.token}@{w.worker}{'' if w.accepted else '(refused)'}+{w.at_ms - t}ms"
        for w in writes
        if (w.job_id, w.scheduled_ms) == (job_id, t)
    ]
    runs = [
        f"{a.token}@{a.worker}+{a.started_ms - t}ms"
        for a in attempts
        if (a.job_id, a.scheduled_ms) == (job_id, t)
    ]
    return f"{key} writes [{', '.join(ws)}] attempts [{', '.join(runs)}]"


def _killed_after(first: Write, kills: list[tuple[str, float]]) -> bool:
    """The worker of ``first`` was SIGKILLed within 1 s after the write."""
    return any(
        worker == first.worker and 0 <= at * 1000 - first.at_ms <= 1000 for worker, at in kills
    )

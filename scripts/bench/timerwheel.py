#!/usr/bin/env python3
"""Benchmark schedd's TimerWheel against heapq (lazy cancel) and asyncio ``loop.call_at``.

Usage: ``.venv/bin/python scripts/bench/timerwheel.py [--sizes 10000,100000,1000000]``

Workload per size n: n timers with expiries uniform over a 60 s window, added in random
order; 30% of them (a random sample) cancelled; then every remaining timer expired. Each impl
gets the same precomputed inputs (expiry ints, items, asyncio ``when`` floats), so what is
measured is the structure's own cost:

* ``add``/``cancel``/``expire`` ops/s and ``cycle_s`` (their sum) on a simulated clock, pure
  CPU, no sleeping. Expiry follows what each structure's driver would do: the wheel advances
  to each ``next_expiry_ms()``; heapq pops everything due at each head entry's time;
  asyncio runs its own ``run_forever`` with ``loop.time`` patched to a fake clock and the
  selector's ``select(timeout)`` patched to move that clock forward by ``timeout`` instead
  of waiting, so the loop's own timer heap, lazy cancellation and callback dispatch run.
* ``bytes_per_timer``: tracemalloc's traced-memory delta across adding all n timers
  (handles, entries, buckets, heap arrays), divided by n. The caller's list of handles is
  preallocated outside the measurement for every impl.
* lateness: on a real event loop with the real clock, ``--late-n`` timers over
  ``--late-window-s`` seconds, 30% cancelled, through ``WheelDriver`` + ``SystemClock`` and
  through ``loop.call_at``; lateness is wall time at the callback minus expire_ms.

The human table goes to stderr; the last stdout line is one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import heapq
import itertools
import json
import math
import random
import statistics
import sys
import time
import tracemalloc
from collections.abc import Callable
from typing import Any, Protocol

from schedd._clock import SystemClock
from schedd.timerwheel import TimerWheel, WheelDriver

WINDOW_MS = 60_000
START_MS = 1_700_000_000_000
CANCEL_FRACTION = 0.3


class Workload:
    """Inputs shared by every impl, built before any measurement starts."""

    def __init__(self, n: int, seed: int = 7) -> None:
        rnd = random.Random(seed + n)
        self.n = n
        self.expiries = [START_MS + rnd.randrange(1, WINDOW_MS) for _ in range(n)]
        self.whens = [e / 1000.0 for e in self.expiries]
        self.items = list(range(n))
        self.cancel_idx = rnd.sample(range(n), int(n * CANCEL_FRACTION))


class Impl(Protocol):
    name: str

    def add_all(self, w: Workload, handles: list[Any]) -> None: ...
    def cancel(self, handles: list[Any], idx: list[int]) -> None: ...
    def expire_all(self) -> int: ...


class WheelImpl:
    name = "wheel"

    def __init__(self) -> None:
        self.wheel: TimerWheel[int] = TimerWheel(tick_ms=10, wheel_size=512, start_ms=START_MS)

    def add_all(self, w: Workload, handles: list[Any]) -> None:
        add = self.wheel.add
        for i, e, item in zip(range(w.n), w.expiries, w.items, strict=True):
            handles[i] = add(e, item)

    def cancel(self, handles: list[Any], idx: list[int]) -> None:
        cancel = self.wheel.cancel
        for i in idx:
            cancel(handles[i])

    def expire_all(self) -> int:
        wheel = self.wheel
        fired: list[int] = []
        while (nxt := wheel.next_expiry_ms()) is not None:
            fired.extend(wheel.advance(nxt))
        return len(fired)


class HeapImpl:
    """The textbook heapq timer: [expire, seq, item, cancelled] entries, lazy removal."""

    name = "heapq"

    def __init__(self) -> None:
        self.heap: list[list[Any]] = []
        self.seq = itertools.count()

    def add_all(self, w: Workload, handles: list[Any]) -> None:
        heap, seq, push = self.heap, self.seq, heapq.heappush

        def add(e: int, item: int) -> list[Any]:
            entry = [e, next(seq), item, False]
            push(heap, entry)
            return entry

        for i, e, item in zip(range(w.n), w.expiries, w.items, strict=True):
            handles[i] = add(e, item)

    def cancel(self, handles: list[Any], idx: list[int]) -> None:
        def cancel(entry: list[Any]) -> None:
            entry[3] = True

        for i in idx:
            cancel(handles[i])

    def expire_all(self) -> int:
        heap, pop = self.heap, heapq.heappop
        fired: list[int] = []
        while heap:
            now = heap[0][0]  # a driver sleeps until the head entry, dead or not
            while heap and heap[0][0] <= now:
                entry = pop(heap)
                if not entry[3]:
                    fired.append(entry[2])
        return len(fired)


class CallAtImpl:
    """asyncio's own timer heap, run on a fast-forwarded fake clock (see module docstring)."""

    name = "call_at"

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.fake = [START_MS / 1000.0]
        self.fired: list[int] = []
        self.last_when = 0.0
        self.loop.time = lambda: self.fake[0]  # type: ignore[method-assign]

        def fake_select(timeout: float | None = None) -> list[Any]:
            # The loop fires handles with when < time() + resolution; at epoch magnitudes the
            # resolution is below one float ulp, so step one ulp past the target.
            if timeout is not None:
                self.fake[0] = math.nextafter(self.fake[0] + timeout, math.inf)
            return []

        self.loop._selector.select = fake_select  # type: ignore[attr-defined]

    def add_all(self, w: Workload, handles: list[Any]) -> None:
        call_at, cb = self.loop.call_at, self.fired.append
        for i, when, item in zip(range(w.n), w.whens, w.items, strict=True):
            handles[i] = call_at(when, cb, item)
        self.last_when = max(w.whens)

    def cancel(self, handles: list[Any], idx: list[int]) -> None:
        for i in idx:
            handles[i].cancel()

    def expire_all(self) -> int:
        self.loop.call_at(self.last_when + 1.0, self.loop.stop)
        self.loop.run_forever()
        self.loop.close()
        return len(self.fired)


IMPLS: dict[str, Callable[[], Impl]] = {
    "wheel": WheelImpl,
    "heapq": HeapImpl,
    "call_at": CallAtImpl,
}


def time_cycle(make: Callable[[], Impl], w: Workload) -> dict[str, float]:
    """One add+cancel+expire cycle; seconds per phase."""
    impl = make()
    handles: list[Any] = [None] * w.n
    gc.collect()
    t0 = time.perf_counter()
    impl.add_all(w, handles)
    t1 = time.perf_counter()
    impl.cancel(handles, w.cancel_idx)
    t2 = time.perf_counter()
    fired = impl.expire_all()
    t3 = time.perf_counter()
    expected = w.n - len(w.cancel_idx)
    if fired != expected:
        raise AssertionError(f"{impl.name}: fired {fired}, expected {expected}")
    return {"add": t1 - t0, "cancel": t2 - t1, "expire": t3 - t2, "cycle": t3 - t0}


def bytes_per_timer(make: Callable[[], Impl], w: Workload) -> float:
    impl = make()
    handles: list[Any] = [None] * w.n
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    impl.add_all(w, handles)
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    if isinstance(impl, CallAtImpl):
        impl.loop.close()
    return (after - before) / w.n


def measure_size(n: int, impls: list[str]) -> list[dict[str, Any]]:
    w = Workload(n)
    repeats = 3 if n <= 100_000 else 1
    out = []
    for name in impls:
        runs = [time_cycle(IMPLS[name], w) for _ in range(repeats)]
        best = min(runs, key=lambda r: r["cycle"])
        live = n - len(w.cancel_idx)
        out.append(
            {
                "impl": name,
                "n": n,
                "add_ops_s": round(n / best["add"]),
                "cancel_ops_s": round(len(w.cancel_idx) / best["cancel"]),
                "expire_ops_s": round(live / best["expire"]),
                "cycle_s": round(best["cycle"], 4),
                "bytes_per_timer": round(bytes_per_timer(IMPLS[name], w), 1),
                "p50_late_ms": None,
                "p99_late_ms": None,
                "max_late_ms": None,
            }
        )
    return out


def _late_plan(n: int, window_s: float) -> tuple[list[int], set[int]]:
    rnd = random.Random(11)
    base = time.time_ns() // 1_000_000 + 300  # leave time to add everything first
    expiries = [base + rnd.randrange(0, int(window_s * 1000)) for _ in range(n)]
    return expiries, set(rnd.sample(range(n), int(n * CANCEL_FRACTION)))


async def late_wheel(n: int, window_s: float) -> list[float]:
    expiries, cancel = _late_plan(n, window_s)
    clock = SystemClock()
    late: list[float] = []
    target = n - len(cancel)

    def on_expired(batch: list[int]) -> None:
        now = time.time_ns() / 1e6
        late.extend(now - e for e in batch)
        if len(late) >= target:
            driver.stop()

    driver: WheelDriver[int] = WheelDriver(
        TimerWheel(tick_ms=10, start_ms=clock.now_ms()), clock, on_expired
    )
    handles = [driver.add(e, e) for e in expiries]
    for i in cancel:
        driver.cancel(handles[i])
    await driver.run()
    return late


async def late_call_at(n: int, window_s: float) -> list[float]:
    expiries, cancel = _late_plan(n, window_s)
    loop = asyncio.get_running_loop()
    late: list[float] = []
    done = loop.create_future()
    target = n - len(cancel)

    def cb(e: int) -> None:
        late.append(time.time_ns() / 1e6 - e)
        if len(late) >= target:
            done.set_result(None)

    wall0, mono0 = time.time_ns() / 1e6, loop.time()
    handles = [loop.call_at(mono0 + (e - wall0) / 1000.0, cb, e) for e in expiries]
    for i in cancel:
        handles[i].cancel()
    await done
    return late


def percentiles(xs: list[float]) -> tuple[float, float, float]:
    qs = statistics.quantiles(xs, n=100, method="inclusive")
    return round(qs[49], 2), round(qs[98], 2), round(max(xs), 2)


def print_table(results: list[dict[str, Any]]) -> None:
    cols = ["impl", "n", "add_ops_s", "cancel_ops_s", "expire_ops_s", "cycle_s"]
    cols += ["bytes_per_timer", "p50_late_ms", "p99_late_ms", "max_late_ms"]
    rows = [
        [
            ("-" if r[c] is None else f"{r[c]:,}" if isinstance(r[c], int) else str(r[c]))
            for c in cols
        ]
        for r in results
    ]
    widths = [max(len(c), *(len(row[i]) for row in rows)) for i, c in enumerate(cols)]
    print("  ".join(c.rjust(wd) for c, wd in zip(cols, widths, strict=True)), file=sys.stderr)
    for row in rows:
        print("  ".join(v.rjust(wd) for v, wd in zip(row, widths, strict=True)), file=sys.stderr)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--sizes", default="10000,100000,1000000")
    ap.add_argument("--impls", default="wheel,heapq,call_at")
    ap.add_argument("--late-n", type=int, default=20_000)
    ap.add_argument("--late-window-s", type=float, default=3.0)
    args = ap.parse_args()
    impls = args.impls.split(",")
    sizes = sorted({int(s) for s in args.sizes.split(",")} | {args.late_n})
    results: list[dict[str, Any]] = []
    for n in sizes:
        print(f"measuring n={n:,} ...", file=sys.stderr)
        results.extend(measure_size(n, impls))
    for name, fn in (("wheel", late_wheel), ("call_at", late_call_at)):
        if name not in impls:
            continue
        late = asyncio.run(fn(args.late_n, args.late_window_s))
        p50, p99, mx = percentiles(late)
        for r in results:
            if r["impl"] == name and r["n"] == args.late_n:
                r.update(p50_late_ms=p50, p99_late_ms=p99, max_late_ms=mx)
    print_table(results)
    ratios: dict[str, dict[str, float]] = {}
    by = {(r["impl"], r["n"]): r for r in results}
    for n in sizes:
        wh, hq = by.get(("wheel", n)), by.get(("heapq", n))
        if wh and hq:
            ratios[str(n)] = {
                "cycle_wheel_over_heapq": round(wh["cycle_s"] / hq["cycle_s"], 3),
                "memory_wheel_over_heapq": round(wh["bytes_per_timer"] / hq["bytes_per_timer"], 3),
            }
    print(json.dumps(ratios, indent=1), file=sys.stderr)
    print(
        json.dumps(
            {
                "window_ms": WINDOW_MS,
                "cancel_fraction": CANCEL_FRACTION,
                "python": sys.version.split()[0],
                "results": results,
                "ratios": ratios,
            }
        )
    )


if __name__ == "__main__":
    main()

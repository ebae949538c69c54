"""Garbage-collector settings for the long-running processes (``schedd node``, ``worker``).

A node holds one object graph per job and per execution in its window, and a burst allocates
hundreds of thousands of short-lived protobuf wrappers; with CPython's default thresholds
(a young collection every 700 allocations, an older one every 10 of those) the collector ran
600-700 times and paused each process for ~0.3 s in total during a 10k burst (measured with
``gc.callbacks``). Almost nothing these processes allocate forms reference cycles, so
collecting less often costs little memory. A young collection walks what was allocated since
the last one, so the threshold also bounds each pause: at 50,000 single pauses reached 58 ms,
at 10,000 they stay under ~10 ms (spread load, p99 lateness 24 -> 10 ms).

Claimed executions break the generational assumption on purpose: they are made seconds before
their fire and all live until it, so during a 100k burst every middle-generation collection
walked them again (up to 130 ms per pause, ~1 s in all), and under a steady load the older
generations' collections paused 10-20 ms every second or two. After each claim round the node
therefore *freezes* what is alive (:func:`freeze_survivors`; O(1)): frozen objects are still freed
by reference counting as usual, only the cycle collector stops walking them. Cyclic garbage
that was frozen is reclaimed when :func:`thaw` (every few minutes) hands everything back to the
oldest generation.

Only processes that called :func:`tune_gc` (the CLI commands) freeze; a program embedding a
node keeps its own collector settings.
"""

from __future__ import annotations

import gc
import time

#: Young-generation threshold: allocations (minus deallocations) between collections.
GEN0_THRESHOLD = 10_000
#: How often frozen objects are handed back to the collector.
THAW_INTERVAL_S = 300.0

_tuned = False
_last_thaw = 0.0


def tune_gc() -> None:
    """Collect less often, and move everything alive now (imports, config) out of the
    collector's view so later full collections do not walk it again."""
    global _tuned, _last_thaw
    gc.collect()
    gc.freeze()
    _, gen1, gen2 = gc.get_threshold()
    gc.set_threshold(GEN0_THRESHOLD, max(gen1, 20), max(gen2, 20))
    _tuned = True
    _last_thaw = time.monotonic()


def freeze_survivors() -> None:
    """After making many long-lived objects at once: stop the collector walking them (and
    everything else alive). No-op unless :func:`tune_gc` was called."""
    if not _tuned:
        return
    global _last_thaw
    now = time.monotonic()
    if now - _last_thaw >= THAW_INTERVAL_S:
        thaw()
        _last_thaw = now
    gc.freeze()


def thaw() -> None:
    """Hand frozen objects back to the oldest generation (its next collection sees them)."""
    gc.unfreeze()

"""Garbage-collector settings for the long-running processes (``schedd node``, ``worker``).

A node holds one object graph per job and per execution in its window, and a burst allocates
hundreds of thousands of short-lived protobuf wrappers; with CPython's default thresholds (a
young collection every 700 allocations) the collector runs hundreds of times in a burst and
its pauses add up to a large share of the burst's lateness. Almost nothing these processes
allocate forms reference cycles, so collecting less often costs little memory. A young
collection walks what was allocated since the last one, so the threshold also bounds each
pause: :data:`GEN0_THRESHOLD` is the compromise between few collections and short ones.

Claimed executions break the generational assumption on purpose: they are made seconds before
their fire and all live until it, so every middle- or old-generation collection would walk
them again. After each claim round the node therefore *freezes* what is alive
(:func:`freeze_survivors`; O(1)): frozen objects are still freed by reference counting as
usual, only the cycle collector stops walking them. Cyclic garbage that was frozen is
reclaimed when :func:`thaw` (every few minutes) hands everything back to the oldest
generation. The measurements behind both choices are in docs/performance.md.

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

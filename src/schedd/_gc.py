"""Garbage-collector settings for the long-running processes (``schedd node``, ``worker``).

A node holds one object graph per job and per execution in its window, and a burst allocates
hundreds of thousands of short-lived protobuf wrappers; with CPython's default thresholds
(a young collection every 700 allocations, an older one every 10 of those) the collector ran
600-700 times and paused each process for ~0.3 s in total during a 10k burst (measured with
``gc.callbacks``). Almost nothing these processes allocate forms reference cycles, so
collecting less often costs little memory. A young collection walks what was allocated since
the last one, so the threshold also bounds each pause: at 50,000 single pauses reached 58 ms,
at 10,000 they stay under ~10 ms (spread load, p99 lateness 24 -> 10 ms).
"""

from __future__ import annotations

import gc

#: Young-generation threshold: allocations (minus deallocations) between collections.
GEN0_THRESHOLD = 10_000


def tune_gc() -> None:
    """Collect less often, and move everything alive now (imports, config) out of the
    collector's view so later full collections do not walk it again."""
    gc.collect()
    gc.freeze()
    _, gen1, gen2 = gc.get_threshold()
    gc.set_threshold(GEN0_THRESHOLD, max(gen1, 20), max(gen2, 20))

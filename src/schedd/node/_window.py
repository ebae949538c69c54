"""The part of a partition's due index held in memory: entries due up to the window's end.

The owner loads ``due/p/`` up to ``now + W`` and extends the window as time passes; claims,
notify and retries add entries inside it; claiming takes them out. Entries beyond the end
stay in etcd until the window reaches them.
"""

from __future__ import annotations

from collections.abc import Iterable

from sortedcontainers import SortedDict

from schedd.store import FIRE, DueEntry

_LAST = "\U0010ffff"  # sorts after every job id: (due_ms, _LAST) bounds a due_ms


def slot(entry: DueEntry) -> tuple[int, str, int]:
    """Where an entry sits in the window: (due_ms, job_id, 0) for a FIRE entry (one per job
    and instant, as its key), (due_ms, job_id, scheduled_ms) for a RUN entry (one per
    execution: two executions of a job due at one instant are two entries)."""
    return (entry.due_ms, entry.job_id, 0 if entry.kind == FIRE else entry.scheduled_ms)


class DueWindow:
    """Due entries keyed by :func:`slot`, up to :attr:`end` (ms since the epoch)."""

    def __init__(self) -> None:
        self.entries: SortedDict = SortedDict()  # slot(entry) -> DueEntry
        self.end = 0

    def __len__(self) -> int:
        return len(self.entries)

    def reset(self, entries: Iterable[DueEntry], end: int) -> None:
        """Replaces everything with a fresh read of the index up to ``end``."""
        self.entries.clear()
        self.end = end
        for e in entries:
            self.entries[slot(e)] = e

    def extend(self, entries: Iterable[DueEntry], end: int) -> None:
        """Adds the slice read beyond the old end; entries already known are kept."""
        for e in entries:
            self.entries.setdefault(slot(e), e)
        self.end = end

    def put(self, entry: DueEntry, *, replace: bool = True) -> bool:
        """Adds an entry if it falls inside the window; returns whether it did."""
        if entry.due_ms > self.end:
            return False
        if replace:
            self.entries[slot(entry)] = entry
        else:
            self.entries.setdefault(slot(entry), entry)
        return True

    def take(self, horizon_ms: int, limit: int) -> list[DueEntry]:
        """Removes and returns entries due up to the horizon, earliest first, at most one per
        job (two claims of one job could touch one key: its state, or a run that a fire would
        create and a RUN entry rewrite) and at most ``limit``. Costs what it
        takes, not what is due: a backlog of overdue entries is not listed on every round."""
        seen: set[str] = set()
        keys: list[tuple[int, str, int]] = []
        for key in self.entries.irange(maximum=(horizon_ms, _LAST)):
            if key[1] in seen:
                continue
            seen.add(key[1])
            keys.append(key)
            if len(keys) >= limit:
                break
        pop = self.entries.pop
        return [pop(key) for key in keys]

    def drop_jobs(self, job_ids: set[str]) -> None:
        """Removes every entry of these jobs (a scan: API changes are rare next to fires)."""
        for key in [k for k in self.entries if k[1] in job_ids]:
            del self.entries[key]

    def first_due_ms(self) -> int | None:
        return int(self.entries.peekitem(0)[0][0]) if self.entries else None

    def count_until(self, due_ms: int) -> int:
        """How many entries are due at or before ``due_ms``."""
        return int(self.entries.bisect_right((due_ms, _LAST)))

"""The node's watch of ``notify/``: API changes reach the owners of the partitions they touch.

Each API transaction writes ``notify/{p}`` (:class:`~schedd.store.Notice`). Every node watches
the whole prefix (one stream; events only for partitions it owns matter). Created jobs' first
due entries go straight into the owner's window; changed jobs are doubted, so the partition's
claim loop re-reads them; "everything", or a watch whose start was compacted away, makes the
partitions reload their windows.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from schedd._clock import Clock
from schedd._errors import SchedError
from schedd.node._live import OwnedPartitions
from schedd.store import KV, Keys, KeyValue, Notice, WatchCompacted, prefix_end

log = logging.getLogger(__name__)


class NotifyWatcher:
    """Routes notices from the store to the partitions this node runs."""

    def __init__(self, kv: KV, keys: Keys, partitions: OwnedPartitions, clock: Clock) -> None:
        self.kv = kv
        self.keys = keys
        self.partitions = partitions
        self.clock = clock

    async def run(self) -> None:
        """Watches until cancelled; a broken watch is re-established from a fresh read."""
        prefix = self.keys.notify_prefix()
        await watch_puts(self.kv, self.clock, prefix, self._put, self._compacted, "notify")

    def _put(self, kv: KeyValue) -> None:
        self.notified(self.keys.parse_notify_key(kv.key), kv.value, kv.mod_revision)

    def _compacted(self) -> None:
        # Changes may have been missed: every partition reads its window again.
        for part in self.partitions.values():
            part.request_reload()

    def notified(self, partition: int, value: bytes, revision: int) -> None:
        """One notice for ``partition`` (ignored unless this node runs it)."""
        part = self.partitions.get(partition)
        if part is None:
            return
        try:
            notice = Notice.decode(value)
        except ValueError as exc:
            log.warning(
                "partition %d: unreadable notice (%s); reloading its window", partition, exc
            )
            part.request_reload()
            return
        if notice.everything:
            part.request_reload()
            return
        if notice.created:
            part.add_created(notice.created_entries(partition, revision))
        if notice.changed:
            part.doubt(notice.changed)


class ArrivalWatcher:
    """Routes arrivals (``arrive/{p}/{child}/{T}/{parent}``: a parent's execution ended) to
    the partitions this node runs, which start or skip the child's execution. A lost event
    costs only time: each partition reads all its arrivals every few seconds anyway."""

    def __init__(self, kv: KV, keys: Keys, partitions: OwnedPartitions, clock: Clock) -> None:
        self.kv = kv
        self.keys = keys
        self.partitions = partitions
        self.clock = clock

    async def run(self) -> None:
        """Watches until cancelled; a broken watch is re-established from a fresh read (the
        partitions' own reads find what was missed meanwhile)."""
        prefix = self.keys.arrive_all_prefix()
        await watch_puts(self.kv, self.clock, prefix, self._put, lambda: None, "arrival")

    def _put(self, kv: KeyValue) -> None:
        p, child, fire_ms, _ = self.keys.parse_arrive_key(kv.key)
        part = self.partitions.get(p)
        if part is not None:
            part.arrived(child, fire_ms)


async def watch_puts(
    kv: KV,
    clock: Clock,
    start: bytes,
    on_put: Callable[[KeyValue], None],
    on_compacted: Callable[[], None],
    what: str,
) -> None:
    """Calls ``on_put`` with each key put under ``start`` from now on, until cancelled; a
    watch that breaks is started again from a fresh read (``on_compacted`` first when its
    start was compacted away: changes may have been missed)."""
    end = prefix_end(start)
    while True:
        try:
            _, rev, _ = await kv.range(start, end, limit=1, keys_only=True)
            async for batch in kv.watch(start, end, rev + 1):
                for ev in batch.events:
                    if ev.kind == "put":
                        on_put(ev.kv)
        except WatchCompacted:
            on_compacted()
        except SchedError as exc:
            log.warning("%s watch failed: %s; watching again", what, exc)
            await clock.sleep(0.5)

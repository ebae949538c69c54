"""A live in-memory copy of one store prefix: list, then watch, re-list on compaction."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from schedd._clock import Clock, SystemClock
from schedd._errors import Unavailable
from schedd.store import KV, KeyValue, WatchBatch, WatchCompacted, prefix_end

log = logging.getLogger(__name__)

#: Called with True after a (re-)list, False after a watch batch.
Listener = Callable[[bool], None]


class PrefixMirror:
    """Keeps :attr:`items` equal to the keys under ``prefix``, as of :attr:`revision`.

    The mirror lists the prefix, then watches from the listed revision + 1. When the watch
    start revision was compacted away (the store raises WatchCompacted), or the
    stream breaks, it lists again, so it never misses a change for good; it may lag.
    Listeners are called synchronously after every list (with True: values may be old) and
    every applied watch batch (with False: changed values were just written).

    Args:
        kv: the store.
        prefix: the key prefix to mirror.
        retry_s: pause before re-listing after etcd was unavailable.
    """

    def __init__(
        self, kv: KV, prefix: bytes, *, retry_s: float = 0.5, clock: Clock | None = None
    ) -> None:
        self._kv = kv
        self._clock: Clock = clock or SystemClock()
        self.prefix = prefix
        self._retry_s = retry_s
        self.items: dict[bytes, KeyValue] = {}
        self.revision = 0
        self.ready = asyncio.Event()
        self._listeners: list[Listener] = []
        self._task: asyncio.Task[None] | None = None

    def add_listener(self, listener: Listener) -> Callable[[], None]:
        """Registers ``listener``; returns a function that removes it."""
        self._listeners.append(listener)
        return lambda: self._listeners.remove(listener)

    async def start(self) -> None:
        """Starts mirroring and waits for the first complete list.

        Raises:
            Unavailable: the first list failed.
        """
        await self._relist()
        self._task = asyncio.create_task(self._run(), name=f"mirror-{self.prefix!r}")

    async def stop(self) -> None:
        """Stops mirroring (what was mirrored stays readable)."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _relist(self) -> None:
        kvs, rev = await self._kv.range_all(self.prefix, prefix_end(self.prefix))
        self.items = {kv.key: kv for kv in kvs}
        self.revision = rev
        self.ready.set()
        self._notify(True)

    async def _run(self) -> None:
        end = prefix_end(self.prefix)
        while True:
            try:
                async for batch in self._kv.watch(self.prefix, end, self.revision + 1):
                    self._apply(batch)
            except WatchCompacted as exc:
                log.info(
                    "watch on %r compacted (%d): re-listing", self.prefix, exc.compact_revision
                )
            except Unavailable as exc:
                log.warning("watch on %r broke: %s; re-listing", self.prefix, exc)
                await self._clock.sleep(self._retry_s)
            try:
                await self._relist()
            except Unavailable as exc:
                log.warning("re-list of %r failed: %s", self.prefix, exc)
                await self._clock.sleep(self._retry_s)

    def _apply(self, batch: WatchBatch) -> None:
        for ev in batch.events:
            if ev.kind == "delete":
                self.items.pop(ev.kv.key, None)
            else:
                self.items[ev.kv.key] = ev.kv
        # Event revisions, not the header's: the mirror has seen everything up to here.
        self.revision = max(self.revision, *(ev.kv.mod_revision for ev in batch.events))
        self._notify(False)

    def _notify(self, listed: bool) -> None:
        for listener in list(self._listeners):
            try:
                listener(listed)
            except Exception:
                log.exception("mirror listener failed")

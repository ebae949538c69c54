"""A node's upkeep of its store: the reachability probe behind its health, compaction, and
the sweep of expired trigger idempotency keys."""

from __future__ import annotations

import logging
from collections.abc import Callable

from schedd._clock import Clock
from schedd._errors import SchedError, Unavailable
from schedd.node._config import NodeConfig
from schedd.node._live import OwnedPartitions
from schedd.obs import Health
from schedd.store import KV, Keys, StoreFailed, expire_trigger_keys, prefix_end

log = logging.getLogger(__name__)


class StoreUpkeep:
    """Probes the store every 2 s (health follows it) and compacts its history.

    A store this process can no longer use (:class:`StoreFailed`: a write to its disk failed)
    is reported once to ``on_failed``, and the probe ends: the node is done with it.

    Compaction keeps ``compaction_keep_revisions`` revisions so watches and in-flight reads
    that start from a recent revision still work; one node does it (the owner of
    partition 0), every ``compaction_interval_s``.
    """

    def __init__(
        self,
        kv: KV,
        keys: Keys,
        config: NodeConfig,
        clock: Clock,
        health: Health,
        partitions: OwnedPartitions,
        on_failed: Callable[[str], None] | None = None,
    ) -> None:
        self.kv = kv
        self.on_failed = on_failed
        self.keys = keys
        self.config = config
        self.clock = clock
        self.health = health
        self.partitions = partitions

    async def probe(self) -> None:
        """Sets health SERVING while the store answers, NOT_SERVING while it does not."""
        while True:
            try:
                await self.kv.get(self.keys.meta_key())
                ok = True
            except StoreFailed as exc:
                self.health.set_serving(False)
                if self.on_failed is not None:
                    self.on_failed(str(exc))
                return
            except Unavailable:
                ok = False
            if ok != self.health.serving:
                log.warning("store %s", "reachable again" if ok else "unreachable: NOT_SERVING")
                self.health.set_serving(ok)
            await self.clock.sleep(2.0)

    async def compact(self) -> None:
        """Compacts the store's history so it does not grow forever (keeps recent revisions)."""
        while True:
            await self.clock.sleep(self.config.compaction_interval_s)
            if 0 not in self.partitions:
                continue  # one node does it: the owner of partition 0
            try:
                meta = self.keys.meta_key()
                _, rev, _ = await self.kv.range(meta, prefix_end(meta), limit=1)
                target = rev - self.config.compaction_keep_revisions
                if target > 0:
                    await self.kv.compact(target)
            except SchedError as exc:
                log.warning("compaction failed: %s", exc)

    async def sweep_trigger_keys(self) -> None:
        """Deletes trigger idempotency keys older than ``trigger_key_ttl_ms``, every
        ``trigger_key_sweep_interval_s``; one node does it (the owner of partition 0). Each
        deletion is compared on the key's mod revision, so two nodes sweeping at once (an
        ownership moving) delete nothing twice and nothing a trigger just rewrote."""
        while True:
            await self.clock.sleep(self.config.trigger_key_sweep_interval_s)
            if 0 not in self.partitions:
                continue
            try:
                n = await expire_trigger_keys(
                    self.kv, self.keys, self.clock.now_ms(), self.config.trigger_key_ttl_ms
                )
            except SchedError as exc:
                log.warning("trigger key sweep failed: %s", exc)
                continue
            if n:
                log.debug("deleted %d expired trigger idempotency keys", n)

"""Partition ownership: each node keeps its fair share of partitions, fenced by epochs."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import math
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from schedd._clock import Clock, SystemClock
from schedd._errors import InvalidArgument, Unavailable
from schedd.coord._bounded import within
from schedd.coord._membership import Membership
from schedd.coord._mirror import PrefixMirror
from schedd.coord._session import Session
from schedd.store import KV, Fence, Keys, prefix_end

log = logging.getLogger(__name__)

OnAcquired = Callable[[Fence], Awaitable[None]]
OnLost = Callable[[int, str], Awaitable[None]]

# Reasons passed to on_lost.
REBALANCE = "rebalance"
SESSION_LOST = "session lost"
FENCED_OUT = "fenced out"
CLOCK_SKEW = "clock skew"
SHUTDOWN = "shutdown"
ACQUIRE_FAILED = "acquire failed"


@dataclass(frozen=True)
class OwnershipConfig:
    """How partitions are shared out.

    Attributes:
        partitions: partition count P (from :class:`ClusterMeta`).
        max_clock_skew_ms: a node whose clock is further than this from the cluster median
            owns nothing; it becomes eligible again below 80 % of it.
        rebalance_interval_s: the longest pause between two reconciliations (changes of
            membership or owners wake the loop at once).
        claim_batch: partitions claimed or released per etcd transaction (nested txns).
        join_wait_s: a node joining peers takes no share until every worker streaming to a
            peer streams to it too, or this long has passed: an execution a worker runs
            when its partition moves here is found by this node's probe only over a stream
            (else it is handed out again and runs twice); workers find a new node, and
            come back to one restarted on its address, within their discovery interval
            (2 s). The margin is wide: a joiner that stopped waiting too early doubled
            fires in the cluster benchmark, one that waits longer only balances later.
    """

    partitions: int
    max_clock_skew_ms: int = 500
    rebalance_interval_s: float = 1.0
    claim_batch: int = 256
    join_wait_s: float = 15.0

    def __post_init__(self) -> None:
        if self.partitions < 1:
            raise InvalidArgument("partitions", f"must be >= 1, got {self.partitions}")
        if self.claim_batch < 1:
            raise InvalidArgument("claim_batch", f"must be >= 1, got {self.claim_batch}")


def rendezvous_score(node_id: str, partition: int) -> int:
    """Highest-random-weight score of (node, partition): stable across processes."""
    digest = hashlib.sha1(f"{node_id}/{partition}".encode(), usedforsecurity=False).digest()
    return int.from_bytes(digest[:8], "big")


def preference_order(node_id: str, partitions: Sequence[int], peers: set[str]) -> list[int]:
    """``partitions`` from most to least wanted by ``node_id``.

    First the partitions this node wins by rendezvous hashing among ``peers`` (its "home"
    partitions, which it tends to get back after a restart), then the rest, each group by
    descending score. Different nodes thus start claiming at different partitions.
    """

    def rank(p: int) -> tuple[bool, int]:
        mine = rendezvous_score(node_id, p)
        home = all(mine >= rendezvous_score(n, p) for n in peers if n != node_id)
        return (not home, -mine)

    return sorted(partitions, key=rank)


class PartitionOwnership:
    """Keeps this node owning ``ceil(P / eligible live nodes)`` partitions.

    Contract:
      * A partition is owned while ``owners/{p}`` exists with this node's claim; its create
        revision is the epoch (:class:`Fence`). A claim is a create-if-absent under the
        session lease, many per transaction (one nested compare each).
      * ``on_acquired(fence)`` is awaited after a claim succeeded, before the partition
        counts in :meth:`owned`'s callers' plans; ``on_lost(p, reason)`` is awaited when
        the node must stop using ``p``. On a graceful release (reasons ``"rebalance"``,
        ``"clock skew"``, ``"shutdown"``) on_lost returns *before* the key is deleted, so
        no other node can own ``p`` while this one still uses it. On ``"session lost"``
        and ``"fenced out"`` the key is already gone (or going): guarded writes with the
        old fence fail, which is what makes a zombie harmless.
      * Callbacks run on the reconcile task and must not call :meth:`release_all`.
      * A node whose clock skew exceeds the limit releases everything and publishes
        itself ineligible; while its skew cannot yet be measured (peers exist but none was
        heard since start) it claims nothing new.

    Args:
        kv: the store.
        keys: the key layout.
        session: started session; owner keys are attached to its lease.
        membership: started membership of this node.
        config: partition count and limits.
        on_acquired: awaited with the fence of each newly owned partition.
        on_lost: awaited with (partition, reason) for each partition given up or lost.
    """

    def __init__(
        self,
        kv: KV,
        keys: Keys,
        session: Session,
        membership: Membership,
        config: OwnershipConfig,
        *,
        on_acquired: OnAcquired,
        on_lost: OnLost,
        clock: Clock | None = None,
    ) -> None:
        self._kv = kv
        self._clock: Clock = clock or SystemClock()
        self._keys = keys
        self._session = session
        self._membership = membership
        self.config = config
        self._on_acquired = on_acquired
        self._on_lost = on_lost
        self._mirror = PrefixMirror(kv, keys.owners_prefix(), clock=self._clock)
        self._owned: dict[int, Fence] = {}
        #: Why this node owns nothing (clock skew beyond the limit); empty when it may own.
        self.skew_reason = ""
        #: Why a joining node takes no share yet (workers of its peers not connected).
        self.join_reason = ""
        self._join_began_ms: int | None = None
        self._undeleted: dict[int, Fence] = {}  # released, but the delete did not get through
        # Released by this node, until the owners mirror no longer shows them: never adopted.
        self._released: set[Fence] = set()
        self._wake = asyncio.Event()
        self._lock = asyncio.Lock()
        self._stopping = False
        self._task: asyncio.Task[None] | None = None

    @property
    def node_id(self) -> str:
        return self._membership.node_id

    def _fields(self, **more: object) -> dict[str, object]:
        """``extra=`` of an ownership log line: the node, and the partitions it is about."""
        return {"node": self.node_id, **more}

    def owned(self) -> dict[int, Fence]:
        """Partition -> fence of every partition this node currently owns (a copy)."""
        return dict(self._owned)

    # -- the loop -------------------------------------------------------------------------------

    def start(self) -> None:
        """Starts reconciling ownership as a task (once), until the session ends or
        :meth:`stop`; :meth:`wait` returns when it has ended."""
        if self._task is None:
            self._task = asyncio.create_task(self._reconcile_loop(), name=f"own-{self.node_id}")

    async def wait(self) -> None:
        """Returns when the session was lost (every owned partition reported with
        ``on_lost(p, "session lost")``) or after :meth:`stop`."""
        if self._task is not None:
            await asyncio.shield(self._task)

    async def stop(self, graceful: bool = True, timeout: float | None = None) -> None:
        """Stops claiming. Graceful: ``on_lost(p, "shutdown")`` then a fenced delete for every
        partition owned (raises Unavailable when the deletes could not be sent; the keys then
        vanish with the session lease), waiting at most ``timeout`` seconds on the clock. Not
        graceful: the task is cancelled, owned keys stay until the session ends."""
        self._stopping = True
        self._wake.set()
        task = self._task
        if not graceful:
            if task is not None:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
            return
        if not await within(self._clock, self._release_owned(), timeout):
            log.warning("node %s: release timed out", self.node_id, extra=self._fields())
        if task is not None:
            await asyncio.gather(task, return_exceptions=True)

    async def _release_owned(self) -> None:
        async with self._lock:
            await self._release(sorted(self._owned), SHUTDOWN)

    async def _reconcile_loop(self) -> None:
        """Reconciles until the session ends or stopping; etcd errors are logged and retried
        on the next round."""
        remove = self._membership.add_listener(self._wake.set)
        self._mirror.add_listener(lambda _listed: self._wake.set())
        try:
            while not self._stopping:
                if self._session.done.is_set():
                    async with self._lock:
                        await self._lose_all(SESSION_LOST)
                    return
                self._wake.clear()
                try:
                    async with self._lock:
                        if not self._stopping:
                            await self._reconcile()
                except Unavailable as exc:
                    log.warning(
                        "node %s: ownership round failed: %s", self.node_id, exc,
                        extra=self._fields(),
                    )  # fmt: skip
                await self._pause()
        finally:
            remove()
            await self._mirror.stop()

    async def _pause(self) -> None:
        waits = [
            asyncio.ensure_future(self._wake.wait()),
            asyncio.ensure_future(self._session.done.wait()),
            asyncio.ensure_future(self._clock.sleep(self.config.rebalance_interval_s)),
        ]
        try:
            await asyncio.wait(waits, return_when="FIRST_COMPLETED")
        finally:
            for w in waits:
                w.cancel()

    async def _reconcile(self) -> None:
        if not self._mirror.ready.is_set():
            await self._mirror.start()
        await self._retry_deletes()
        await self._drop_fenced_out()
        await self._adopt_unanswered_claims()
        verdict = self._clock_verdict()
        if verdict == "bad":
            await self._membership.set_eligible(False)
            await self._release(sorted(self._owned), CLOCK_SKEW)
            return
        if verdict == "ok" and (self._membership.info.eligible or self._workers_joined()):
            await self._membership.set_eligible(True)
        if not self._membership.info.eligible:
            return
        target = self.target()
        excess = len(self._owned) - target
        if excess > 0:
            await self._release(self._release_choice(excess), REBALANCE)
        elif excess < 0 and verdict == "ok":
            await self._claim(-excess)

    def _workers_joined(self) -> bool:
        """Whether a joining node may take its share: every worker a peer has is connected
        here too, or ``join_wait_s`` passed since it began waiting (see OwnershipConfig)."""
        now = self._clock.now_ms()
        if self._join_began_ms is None:
            self._join_began_ms = now
        missing = sorted(self._membership.peer_workers() - set(self._membership.local_workers()))
        waited_s = (now - self._join_began_ms) / 1000
        if missing and waited_s < self.config.join_wait_s:
            if not self.join_reason:
                log.info(
                    "node %s: waiting up to %.0f s for workers %s (connected to peers) to "
                    "connect before taking a share", self.node_id, self.config.join_wait_s,
                    ", ".join(missing), extra=self._fields(),
                )  # fmt: skip
            self.join_reason = f"waiting for workers {', '.join(missing)} to connect"
            return False
        if missing:
            log.warning(
                "node %s: taking a share although workers %s (connected to peers) did not "
                "connect within %.0f s", self.node_id, ", ".join(missing), waited_s,
                extra=self._fields(),
            )  # fmt: skip
        elif self.join_reason:
            log.info(
                "node %s: its peers' workers are connected: taking a share", self.node_id,
                extra=self._fields(),
            )  # fmt: skip
        self.join_reason = ""
        return True

    def target(self) -> int:
        """This node's fair share: ceil(P / eligible live nodes)."""
        eligible = self._membership.eligible_nodes() | {self.node_id}
        return math.ceil(self.config.partitions / len(eligible))

    def _clock_verdict(self) -> str:
        """ "ok", "bad" (beyond the limit) or "unknown" (peers not heard from yet)."""
        skew = self._membership.clock_skew_ms()
        peers = set(self._membership.live_nodes()) - {self.node_id}
        if skew is None:
            return "unknown" if peers else "ok"
        limit = self.config.max_clock_skew_ms
        if abs(skew) > limit:
            if not self.skew_reason:
                log.warning(
                    "node %s: clock skew %d ms (against the median of %d live nodes) > %d ms "
                    "(--max-clock-skew-ms): owning nothing until it is back within %d ms",
                    self.node_id, skew, len(peers) + 1, limit, int(0.8 * limit),
                    extra=self._fields(),
                )  # fmt: skip
            self.skew_reason = f"clock skew {skew} ms > {limit} ms"
            return "bad"
        if self.skew_reason and abs(skew) > 0.8 * limit:
            return "bad"  # hysteresis: come back only well inside the limit
        if self.skew_reason:
            log.warning(
                "node %s: clock skew %d ms is back within the limit: owning partitions again",
                self.node_id, skew, extra=self._fields(),
            )  # fmt: skip
            self.skew_reason = ""
        return "ok"

    # -- claim and release ----------------------------------------------------------------------

    def _free_partitions(self) -> list[int]:
        taken = {self._keys.parse_owner_key(k) for k in self._mirror.items}
        taken |= set(self._owned) | set(self._undeleted)
        return [p for p in range(self.config.partitions) if p not in taken]

    async def _claim(self, want: int) -> None:
        peers = self._membership.eligible_nodes()
        wanted = preference_order(self.node_id, self._free_partitions(), peers)[:want]
        won: list[Fence] = []
        for start in range(0, len(wanted), self.config.claim_batch):
            chunk = wanted[start : start + self.config.claim_batch]
            won.extend(await self._claim_batch(chunk))
        # Loaded side by side: a takeover of a dead node's share waits for its etcd reads
        # (window, live executions, re-tokening) once, not once per partition in a row.
        await asyncio.gather(*(self._acquired(fence) for fence in won))

    async def _claim_batch(self, partitions: list[int]) -> list[Fence]:
        value, lease = self.node_id.encode(), self._session.lease_id
        o = self._kv.ops
        items = []
        for p in partitions:
            key = self._keys.owner_key(p)
            items.append(o.txn([o.cmp_create(key, 0)], [o.put(key, value, lease)]))
        resp = await self._kv.txn([], items)
        # Every write of one transaction has the transaction's revision: the epoch.
        epoch = resp.revision
        won = []
        for p, ok in zip(partitions, resp.nested_outcomes(), strict=True):
            if ok:
                fence = Fence(p, self._keys.owner_key(p), epoch)
                self._owned[p] = fence
                won.append(fence)
        if won:
            claimed = [f.partition for f in won]
            log.info(
                "node %s claimed %s at epoch %d", self.node_id, claimed, epoch,
                extra=self._fields(partitions=claimed),
            )  # fmt: skip
        return won

    async def _acquired(self, fence: Fence) -> None:
        if self._owned.get(fence.partition) != fence:
            return  # lost again before we got to tell the node
        try:
            await self._on_acquired(fence)
        except Exception:
            log.exception(
                "node %s: on_acquired(%d) failed", self.node_id, fence.partition,
                extra=self._fields(partition=fence.partition),
            )  # fmt: skip
            await self._release([fence.partition], ACQUIRE_FAILED)

    def _release_choice(self, count: int) -> list[int]:
        peers = self._membership.eligible_nodes()
        order = preference_order(self.node_id, sorted(self._owned), peers)
        return order[-count:]

    async def _release(self, partitions: list[int], reason: str) -> None:
        """Gracefully gives partitions up: on_lost first, then fenced deletes."""
        fences = [self._owned.pop(p) for p in partitions if p in self._owned]
        for fence in fences:
            await self._call_lost(fence.partition, reason)
        self._released.update(fences)
        self._undeleted.update({f.partition: f for f in fences})
        await self._retry_deletes()
        if fences:
            released = [f.partition for f in fences]
            log.info(
                "node %s released %s (%s)", self.node_id, released, reason,
                extra=self._fields(partitions=released),
            )  # fmt: skip

    async def _retry_deletes(self) -> None:
        fences = list(self._undeleted.values())
        for start in range(0, len(fences), self.config.claim_batch):
            chunk = fences[start : start + self.config.claim_batch]
            o = self._kv.ops
            ops = [o.txn([f.compare(o)], [o.delete(f.key)]) for f in chunk]
            await self._kv.txn([], ops)
            for f in chunk:
                self._undeleted.pop(f.partition, None)

    async def _adopt_unanswered_claims(self) -> None:
        """Owner keys of this session that this node does not know it holds: a claim whose
        answer was lost (etcd applied it, the reply never came). They are this node's (its
        lease), so it takes them up rather than leave them owned by nobody until the session
        ends.

        A key this node released is not one of them, though a lagging mirror may still show
        it after the delete got through (watch broken, re-list failing): it stays in
        ``_released`` until the mirror has caught up with it."""
        lease = self._session.lease_id
        shown: set[Fence] = set()
        for key, kv in sorted(self._mirror.items.items()):
            if kv.lease != lease or kv.value != self.node_id.encode():
                continue
            p = self._keys.parse_owner_key(key)
            fence = Fence(p, key, kv.create_revision)
            shown.add(fence)
            if p in self._owned or p in self._undeleted or fence in self._released:
                continue
            self._owned[p] = fence
            log.warning(
                "node %s: adopting partition %d (claim answer lost)", self.node_id, p,
                extra=self._fields(partition=p),
            )  # fmt: skip
            await self._acquired(fence)
        seen_up_to = self._mirror.revision
        self._released = {f for f in self._released if f in shown or seen_up_to < f.epoch}

    async def _drop_fenced_out(self) -> None:
        """Reports partitions whose owner key vanished or was re-created by someone else."""
        for p, fence in sorted(self._owned.items()):
            if self._mirror.revision < fence.epoch:
                continue  # the mirror has not seen our claim yet
            kv = self._mirror.items.get(fence.key)
            if kv is None or kv.create_revision != fence.epoch:
                del self._owned[p]
                log.warning(
                    "node %s: partition %d epoch %d is gone", self.node_id, p, fence.epoch,
                    extra=self._fields(partition=p),
                )  # fmt: skip
                await self._call_lost(p, FENCED_OUT)

    async def _lose_all(self, reason: str) -> None:
        self._undeleted.clear()  # the lease is gone, and with it the keys
        self._released.clear()
        for p in sorted(self._owned):
            del self._owned[p]
            await self._call_lost(p, reason)

    async def _call_lost(self, partition: int, reason: str) -> None:
        try:
            await self._on_lost(partition, reason)
        except Exception:
            log.exception(
                "node %s: on_lost(%d, %s) failed", self.node_id, partition, reason,
                extra=self._fields(partition=partition),
            )  # fmt: skip

    # -- shutdown and status --------------------------------------------------------------------

    async def release(self, partition: int, reason: str) -> None:
        """Gives one partition up now (``on_lost`` first, then the fenced delete).

        For a partition this node can no longer serve (its runner crashed): the key goes, so
        the next round of any node, this one included, claims it afresh from etcd. Not to be
        called from the ``on_acquired``/``on_lost`` callbacks (they hold the same lock).
        """
        async with self._lock:
            if partition in self._owned:
                await self._release([partition], reason)
        self._wake.set()

    async def partitions_status(self) -> list[tuple[int, str, int]]:
        """(partition, owner node id or "", epoch or 0) for every partition, read from etcd."""
        prefix = self._keys.owners_prefix()
        kvs, _ = await self._kv.range_all(prefix, prefix_end(prefix))
        owners: dict[int, tuple[str, int]] = {}
        for kv in kvs:
            with contextlib.suppress(ValueError):
                owners[self._keys.parse_owner_key(kv.key)] = (kv.value.decode(), kv.create_revision)
        return [(p, *owners.get(p, ("", 0))) for p in range(self.config.partitions)]

"""The node's part in the cluster: a session, a membership record, a share of the partitions.

:class:`Coordinator` keeps a session with the store (a new one when it is lost), publishes the
node's record, and runs the partition ownership; each partition it acquires becomes a
:class:`~._partition.Partition` (made by the node's factory) in the table of owned partitions,
and each it loses or gives up is stopped and removed. It is also the partitions'
:class:`~._ports.PartitionEvents`: a fence lost or a loop crashed comes back here.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import Any

from schedd._clock import Clock
from schedd._errors import SchedError
from schedd.coord import (
    Fence,
    Membership,
    NodeInfo,
    OwnershipConfig,
    PartitionOwnership,
    Session,
)
from schedd.node._config import NodeConfig
from schedd.node._live import OwnedPartitions
from schedd.node._partition import Partition
from schedd.obs import MetricsRecorder
from schedd.store import KV, Keys

log = logging.getLogger(__name__)

#: Why a partition is handed over on purpose: its claimed fires are given back first.
GRACEFUL_REASONS = frozenset({"shutdown", "rebalance", "clock skew"})


class SessionFencing:
    """Whether this node may act now: its current session is certainly alive. The fire policy
    and the dispatcher ask it before handing anything out (self-fencing); the coordinator
    keeps its session current."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.session: Session | None = None  # None before the first session

    def may_act(self) -> bool:
        """Whether the session is certainly alive (see ``Session.may_act``)."""
        session = self.session
        return session is not None and session.may_act()

    def live_until_ms(self) -> int:
        """The instant (this node's clock) until which it certainly holds its fences: what it
        promises workers holding its executions (0: no promise)."""
        session = self.session
        left_s = session.held_for_s() if session is not None else 0.0
        return self.clock.now_ms() + int(left_s * 1000) if left_s > 0 else 0


class Coordinator:
    """Sessions, membership and partition ownership of one node.

    Args:
        kv, keys, config, clock: the store and the node's settings.
        partitions: the table of the partitions this node runs (this fills it).
        fencing: what the node's roles ask whether its session is certainly alive (this
            keeps its session current).
        make_partition: builds the partition of a fence just acquired.
        node_info: the node's record as published now (address, version, start).
        worker_ids: the ids of the workers connected to this node (its record shows them).
        on_released: told the executions a partition still had in memory when it stopped.
        recorder: where ownership changes are reported.
    """

    def __init__(
        self,
        kv: KV,
        keys: Keys,
        config: NodeConfig,
        clock: Clock,
        partitions: OwnedPartitions,
        fencing: SessionFencing,
        *,
        make_partition: Callable[[Fence], Partition],
        node_info: Callable[[], NodeInfo],
        worker_ids: Callable[[], set[str]],
        on_released: Callable[[Sequence[str]], None],
        recorder: MetricsRecorder,
    ) -> None:
        self.kv, self.keys, self.config, self.clock = kv, keys, config, clock
        self.partitions = partitions
        self.fencing = fencing
        self._make_partition = make_partition
        self._node_info = node_info
        self._worker_ids = worker_ids
        self._on_released = on_released
        self.recorder = recorder
        self.session: Session | None = None  # None between sessions
        self.membership: Membership | None = None
        self.ownership: PartitionOwnership | None = None
        self._stopping = False
        self._tasks: list[asyncio.Task[None]] = []

    # -- the loop -------------------------------------------------------------------------------

    async def run(self) -> None:
        """Keeps a session and the partition share; a lost session is replaced by a new one."""
        node = self.config.node_id
        while not self._stopping:
            try:
                await self._one_session()
            except SchedError as exc:
                log.warning(
                    "node %s: coordination failed: %s; retrying", node, exc,
                    extra={"node": node},
                )  # fmt: skip
            except Exception:
                # Its partitions' fences live on this session, which is closed below: stop
                # them first, so nothing runs under a fence the node no longer keeps.
                log.exception(
                    "node %s: coordination crashed; starting over", node, extra={"node": node}
                )
                for p in self.partitions:
                    await self.lost(p, "coordination crashed")
            if self._stopping:
                # The ownership ended because stop() is releasing the partitions: their
                # give-backs and deletes are fenced by owner keys that live on this session,
                # so stop() ends it once they are done.
                return
            await self._end_session()
            await self.clock.sleep(1.0)

    async def _one_session(self) -> None:
        cfg = self.config
        self.session = self.fencing.session = Session(
            self.kv, ttl_s=cfg.session_ttl_s, clock=self.clock
        )
        await self.session.start()
        self.membership = Membership(
            self.kv, self.keys, self.session, self._node_info(), clock=self.clock,
            workers=self._worker_ids,
        )  # fmt: skip
        await self.membership.start()
        self.ownership = PartitionOwnership(
            self.kv,
            self.keys,
            self.session,
            self.membership,
            OwnershipConfig(cfg.partitions, max_clock_skew_ms=cfg.max_clock_skew_ms),
            on_acquired=self._acquired,
            on_lost=self.lost,
            clock=self.clock,
        )
        self.ownership.start()
        await self.ownership.wait()

    async def stop(self, graceful: bool = True, timeout: float | None = None) -> None:
        """Graceful: releases every partition (claimed fires given back, owner keys deleted)
        within ``timeout``, so peers take over at once. Then every partition left stops and
        the session ends (revoked when graceful: the owner keys go with it)."""
        self._stopping = True
        if self.ownership is not None:
            try:
                await self.ownership.stop(graceful=graceful, timeout=timeout)
            except SchedError as exc:
                log.warning(
                    "node %s: releasing partitions failed: %s", self.config.node_id, exc,
                    extra={"node": self.config.node_id},
                )  # fmt: skip
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        reason = "shutdown" if graceful else "stopped"
        for p in self.partitions:
            await self.lost(p, reason)
        await self._end_session()

    async def _end_session(self) -> None:
        if self.membership is not None:
            await _quietly(self.membership.stop())
        if self.session is not None:
            await _quietly(self.session.stop())

    def members(self) -> dict[str, str]:
        """Node id -> address of every live node (this one included)."""
        membership = self.membership
        if membership is None:
            return {}
        return {n: info.address for n, info in membership.live_nodes().items()}

    # -- partitions -----------------------------------------------------------------------------

    async def _acquired(self, fence: Fence) -> None:
        part = self._make_partition(fence)
        self.partitions.add(part)
        self.recorder.ownership_changed()
        self.recorder.partitions_owned(len(self.partitions))
        try:
            await part.start()
        except SchedError:
            self.partitions.remove(fence.partition)
            await part.stop()
            raise

    async def lost(self, partition: int, reason: str) -> None:
        """Stops a partition this node no longer owns (or gives up) and forgets it."""
        part = self.partitions.get(partition)
        if part is None:
            return
        # Handed over on purpose: claimed fires are given back first, while the partition
        # still runs here under a fence that holds (the ownership deletes the key after).
        graceful = reason in GRACEFUL_REASONS
        ids = await part.stop(graceful=graceful, timeout=self.config.stop_timeout_s)
        self.partitions.remove(partition)
        self.recorder.ownership_changed()
        self.recorder.partitions_owned(len(self.partitions))
        self._on_released(ids)
        log.info(
            "partition %d released (%s)", partition, reason,
            extra={"node": self.config.node_id, "partition": partition},
        )  # fmt: skip

    def partition_lost(self, partition: int, reason: str) -> None:
        """A partition's fence no longer holds (:class:`PartitionEvents`): stop it."""
        self._spawn(self.lost(partition, reason))

    def partition_failed(self, partition: int, reason: str) -> None:
        """A partition's loop crashed: stop it and give the partition up, so it is claimed
        afresh (by a peer, or by this node with a new partition) instead of staying owned and
        silent."""

        async def release() -> None:
            ownership = self.ownership
            if ownership is not None and partition in ownership.owned():
                await ownership.release(partition, f"runner failed: {reason}")
            await self.lost(partition, f"runner failed: {reason}")

        self._spawn(release())

    def _spawn(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.append(task)
        task.add_done_callback(self._tasks.remove)


async def _quietly(stop: Awaitable[None]) -> None:
    """Awaits a stop whose failure changes nothing here (the lease expires on its own)."""
    try:
        await stop
    except Exception as exc:
        log.debug("stopping quietly failed: %s", exc)

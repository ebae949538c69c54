"""One simulated node: a real Session, Membership and PartitionOwnership behind a gate.

A node is a process. Everything it does reaches the shared :class:`MemoryKV` through its own
:class:`GatedKV` and waits for time through its own :class:`NodeClock`, and both pass through
the node's :class:`Gate`:

* running: the gate is open, calls pass.
* paused (SIGSTOP, the zombie): the gate is closed. A task stops at its next store call, its
  next wake-up from a sleep, or its next watch batch. A call already sent completes in the
  store (it reached etcd before the freeze) but its answer is handed back only after the
  resume. Between two such points a task only touches its own memory, which nobody else can
  observe, so freezing there is as good as freezing anywhere. Nothing is cancelled: on resume
  the node carries on with the beliefs it had, exactly like a process after SIGCONT.
* crashed (SIGKILL): the gate closes for good. Nothing the node does reaches the store again;
  it releases nothing, so its lease expires on the clock and its keys vanish with it.
* cut off (:attr:`GatedKV.cut_off`): the process runs but its calls fail (sent or not) and
  its watches break, as when the network between it and the store is down.

What the node runs is the production coordination code; the sim adds only the partition
"workload": every ``work_interval_s``, per partition it believes it owns (from
``on_acquired``/``on_lost``), one batch through :meth:`PartitionStore.apply`, so every write
carries the fence exactly as a partition runner's writes do: a ledger entry with the epoch,
and re-tokening or claiming fires (:mod:`sim._fires`).

When its session is lost the node starts over with a new session under the same id, as a
supervisor restarting the coordination would; a graceful leave (:meth:`SimNode.leave`) runs
a graceful ``stop`` of the ownership and stops membership and session.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from schedd._clock import ManualClock
from schedd._errors import FencedOut, Unavailable
from schedd.coord import Fence, Membership, NodeInfo, OwnershipConfig, PartitionOwnership, Session
from schedd.store import KeyValue, MemoryKV, StoreWrites, WatchBatch
from schedd.store._owner import Item
from schedd.store.abc import Compare, Op
from sim._fires import FireRunner
from sim._keys import KEYS, ledger_key


class Gate:
    """Whether a node's process runs: open, closed (paused or crashed), or halted (the
    simulation is over: every task of the node ends at its next passage)."""

    def __init__(self) -> None:
        self._open = asyncio.Event()
        self._open.set()
        self._halted = False

    def is_open(self) -> bool:
        return self._open.is_set()

    def open(self) -> None:
        self._open.set()

    def close(self) -> None:
        self._open.clear()

    def halt(self) -> None:
        self._halted = True
        self._open.set()

    async def passage(self) -> None:
        """Returns at once while open; waits while closed; ends the task once halted."""
        await self._open.wait()
        if self._halted:
            raise asyncio.CancelledError("the simulation is over")


class GatedKV:
    """The shared store as one node sees it: every call waits for the node's gate, before
    it is sent and again before its answer is returned (see the module docstring).

    While :attr:`cut_off` (the node cut off from the store, the network's fault, not the
    process's) a call fails unsent, an answer in flight is lost (the call may have applied),
    and a watch stream breaks at its next batch.
    """

    ops = MemoryKV.ops

    def __init__(self, kv: MemoryKV, gate: Gate) -> None:
        self._kv = kv
        self._gate = gate
        self.cut_off = False

    async def _call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        await self._gate.passage()
        if self.cut_off:
            await asyncio.sleep(0)
            raise Unavailable("sim: cut off from the store, not sent")
        result = await fn(*args, **kwargs)
        await self._gate.passage()
        if self.cut_off:
            raise Unavailable("sim: cut off from the store, answer lost")
        return result

    def writes(self) -> StoreWrites | None:
        return self._kv.writes()

    async def close(self) -> None:
        """A node never closes the shared store."""

    async def get(self, key: bytes) -> KeyValue | None:
        result: KeyValue | None = await self._call(self._kv.get, key)
        return result

    async def range(self, start: bytes, end: bytes, **kw: Any) -> tuple[list[KeyValue], int, bool]:
        result: tuple[list[KeyValue], int, bool] = await self._call(
            self._kv.range, start, end, **kw
        )
        return result

    async def range_all(self, start: bytes, end: bytes, **kw: Any) -> tuple[list[KeyValue], int]:
        result: tuple[list[KeyValue], int] = await self._call(self._kv.range_all, start, end, **kw)
        return result

    async def get_many(self, keys: Sequence[bytes], **kw: Any) -> list[KeyValue | None]:
        result: list[KeyValue | None] = await self._call(self._kv.get_many, keys, **kw)
        return result

    async def count(self, start: bytes, end: bytes) -> int:
        result: int = await self._call(self._kv.count, start, end)
        return result

    async def txn(
        self,
        compares: Sequence[Compare],
        success: Sequence[Op],
        failure: Sequence[Op] = (),
        **kw: Any,
    ) -> Any:
        return await self._call(self._kv.txn, compares, success, failure, **kw)

    async def put(self, key: bytes, value: bytes, *, lease: int = 0) -> int:
        result: int = await self._call(self._kv.put, key, value, lease=lease)
        return result

    async def delete(self, key: bytes, end: bytes | None = None) -> int:
        result: int = await self._call(self._kv.delete, key, end)
        return result

    async def compact(self, revision: int) -> None:
        await self._call(self._kv.compact, revision)

    async def grant(self, ttl_s: int) -> int:
        result: int = await self._call(self._kv.grant, ttl_s)
        return result

    async def keepalive_once(self, lease_id: int) -> int:
        result: int = await self._call(self._kv.keepalive_once, lease_id)
        return result

    async def revoke(self, lease_id: int) -> None:
        await self._call(self._kv.revoke, lease_id)

    async def watch(
        self, start: bytes, end: bytes, start_revision: int
    ) -> AsyncIterator[WatchBatch]:
        await self._gate.passage()
        if self.cut_off:
            raise Unavailable("sim: cut off from the store, watch not started")
        async for batch in self._kv.watch(start, end, start_revision):
            await self._gate.passage()  # a paused process reads nothing off the stream
            if self.cut_off:
                raise Unavailable("sim: cut off from the store, watch broke")
            yield batch


class NodeClock:
    """The shared manual clock as one node sees it: a fixed wall-clock skew, and sleeps that
    end only while the node runs. Monotonic time is the shared one (only rates matter)."""

    def __init__(self, base: ManualClock, gate: Gate, skew_ms: int) -> None:
        self._base = base
        self._gate = gate
        self.skew_ms = skew_ms

    def now_ms(self) -> int:
        return self._base.now_ms() + self.skew_ms

    def monotonic(self) -> float:
        return self._base.monotonic()

    async def sleep(self, seconds: float) -> None:
        await self._base.sleep(seconds)
        await self._gate.passage()


@dataclass(frozen=True)
class NodeParams:
    """Timing of every simulated node."""

    partitions: int
    ttl_s: int = 3
    refresh_s: float = 2.0
    rebalance_interval_s: float = 1.0
    work_interval_s: float = 2.0
    fire_every_s: float = 1.5
    start_s: float = 0.0  # monotonic time fire 0 is due


@dataclass
class WorkStats:
    """What the node's ledger writes met: applied, fenced out, unknown (store fault)."""

    applied: int = 0
    fenced_out: int = 0
    unknown: int = 0


class SimNode:
    """A node process (see the module docstring). ``status`` is one of ``joining``, ``up``,
    ``paused``, ``leaving``, ``left``, ``crashed``; ``believed`` is what its partition runner
    believes it owns."""

    def __init__(
        self,
        node_id: str,
        kv: MemoryKV,
        clock: ManualClock,
        params: NodeParams,
        *,
        skew_ms: int,
        trace: Callable[[str], None],
    ) -> None:
        self.node_id = node_id
        self.gate = Gate()
        self.kv = GatedKV(kv, self.gate)
        self.clock = NodeClock(clock, self.gate, skew_ms)
        self.params = params
        self.status = "joining"
        self.paused_until = 0.0
        self.cut_until = 0.0
        self.believed: dict[int, Fence] = {}
        self.stats = WorkStats()
        self.running_s = 0.0  # clock time spent with the gate open
        self.invalid_since: dict[Fence, float] = {}  # believed fence -> running_s when seen invalid
        self.session: Session | None = None
        self.membership: Membership | None = None
        self.ownership: PartitionOwnership | None = None
        self._trace = trace
        self._seq = 0
        self.fires = FireRunner(node_id, params.fire_every_s)
        self._leaving = False
        self._release: asyncio.Task[None] | None = None
        self.work: asyncio.Task[None] | None = None  # the partition runners of this session
        self.task = asyncio.create_task(self._life(), name=f"sim-{node_id}")

    @property
    def live(self) -> bool:
        """Up and running with a session it believes alive."""
        return self.status == "up" and self.session is not None and not self.session.done.is_set()

    # -- driver actions -------------------------------------------------------------------------

    def pause(self, until: float) -> None:
        self.status, self.paused_until = "paused", until
        self.gate.close()

    def resume(self) -> None:
        self.status = "up"
        self.gate.open()

    def crash(self) -> None:
        self.status = "crashed"
        self.gate.close()

    def leave(self) -> None:
        self.status = "leaving"
        self._leaving = True
        if self.ownership is not None:
            self._release = asyncio.create_task(
                self._release_all(), name=f"sim-leave-{self.node_id}"
            )

    # -- the process ----------------------------------------------------------------------------

    async def _life(self) -> None:
        while not self._leaving:
            if not await self._join():
                await self.clock.sleep(self.params.ttl_s / 3)  # back off, then try again
                continue
            assert self.ownership is not None and self.membership is not None
            self.work = work = asyncio.create_task(self._work(), name=f"sim-work-{self.node_id}")
            try:
                if not self._leaving:
                    self.ownership.start()
                    await self.ownership.wait()
            except asyncio.CancelledError:
                await self.ownership.stop(graceful=False)
                raise
            finally:
                work.cancel()
            if self._release is not None:
                await self._release
            elif not self._leaving:
                self._trace(f"{self.node_id} session lost, rejoining")
            await self.membership.stop()
            assert self.session is not None
            await self.session.stop()
        self.status = "left"
        self._trace(f"{self.node_id} left")

    async def _join(self) -> bool:
        p = self.params
        self.session = session = Session(self.kv, ttl_s=p.ttl_s, clock=self.clock)  # type: ignore[arg-type]
        try:
            await session.start()
            now = self.clock.now_ms()
            info = NodeInfo(self.node_id, f"{self.node_id}:1", "sim", now, now)
            self.membership = Membership(
                self.kv,  # type: ignore[arg-type]
                KEYS,
                session,
                info,
                clock=self.clock,
                refresh_s=p.refresh_s,
            )
            await self.membership.start()
        except Unavailable as exc:
            self._trace(f"{self.node_id} join failed: {exc}")
            with contextlib.suppress(Unavailable):
                await session.stop()
            return False
        self.ownership = PartitionOwnership(
            self.kv,  # type: ignore[arg-type]
            KEYS,
            session,
            self.membership,
            OwnershipConfig(p.partitions, rebalance_interval_s=p.rebalance_interval_s),
            on_acquired=self._on_acquired,
            on_lost=self._on_lost,
            clock=self.clock,
        )
        if self.status == "joining":
            self.status = "up"
        self._trace(f"{self.node_id} up lease={session.lease_id:x}")
        return True

    async def _release_all(self) -> None:
        assert self.ownership is not None
        with contextlib.suppress(Unavailable):
            await self.ownership.stop(graceful=True)

    async def _on_acquired(self, fence: Fence) -> None:
        self.believed[fence.partition] = fence

    async def _on_lost(self, partition: int, reason: str) -> None:
        fence = self.believed.pop(partition, None)
        if fence is not None:
            self.fires.retokened.discard(fence)

    async def _work(self) -> None:
        """The partition runners. Per tick: results of what was dispatched come back, then
        per believed partition one fenced batch re-tokens or claims fires (:mod:`sim._fires`)
        and appends to the partition's ledger (``ledger/{p}/...``, value: the epoch)."""
        ops = MemoryKV.ops
        while True:
            await self.clock.sleep(self.params.work_interval_s)
            with contextlib.suppress(Unavailable):
                await self.fires.results(self.kv)  # type: ignore[arg-type]
            now_s = self.clock.monotonic() - self.params.start_s
            for p, fence in sorted(self.believed.items()):
                if self.believed.get(p) != fence:
                    continue  # lost during this tick
                self._seq += 1
                put = ops.put(ledger_key(p, self.node_id, self._seq), b"%d" % fence.epoch)
                try:
                    await self.fires.tick(self.kv, fence, now_s, Item(ops.txn([], [put])))  # type: ignore[arg-type]
                    self.stats.applied += 1
                except FencedOut:
                    self.stats.fenced_out += 1
                except Unavailable:
                    self.stats.unknown += 1

"""Group commit: the fenced batches of a node's partitions that come within a short linger go
to the store as one transaction.

Each partition writes its own fenced transactions; at a moderate rate (results arriving one
by one, spread over many partitions) that is about one store transaction per execution. A
:class:`GroupCommit` shared by a node's partition stores waits up to ``linger_ms`` after the
first batch (or until ``max_items`` items wait) and sends every batch that came meanwhile in
one transaction: each partition's fence is one of its compares, each batch's items are its
nested transactions, in order. The start of a fire never waits for it: fires write nothing.

What one batch sees is what it would see alone:

- written: its items' outcomes and the transaction's revision (their fencing token);
- a fence that no longer holds: the joint transaction wrote nothing, so every batch of it is
  sent again alone, and only the batch whose fence is gone finds that out;
- refused as malformed (:class:`TxnRejected`: a key written twice, now possibly by two
  batches): every batch is sent again alone, and one that is malformed alone is refused alone;
- any other error (the outcome unknown): every batch of the group gets it, as a lone
  transaction's batch would.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from dataclasses import dataclass, field

from schedd.store._types import Fence
from schedd.store.abc import KV, TxnRejected

#: A nested transaction built with the store's OpBuilder (a partition store's ``Item``).
Item = object


@dataclass(slots=True)
class Committed:
    """What a batch's transaction did: whether its fence held, and if so each item's
    outcome (its compares held and it was written) and the revision it was written at."""

    succeeded: bool
    outcomes: list[bool]
    revision: int


@dataclass(slots=True)
class _Batch:
    fence: Fence
    items: Sequence[Item]
    done: asyncio.Future[Committed] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )


class GroupCommit:
    """Joins concurrent fenced batches into one store transaction (see the module's docstring).

    Args:
        kv: the store.
        linger_ms: how long the first batch waits for others (0: only batches that come on
            the same event-loop pass are joined).
        max_items: the most items one transaction carries; a group that reaches it goes at
            once, and a batch larger than it goes alone.
        write_gate: bounds the transactions in flight at once (shared with the node).
    """

    def __init__(
        self,
        kv: KV,
        *,
        linger_ms: float = 2.0,
        max_items: int = 128,
        write_gate: asyncio.Semaphore | None = None,
    ) -> None:
        self.kv = kv
        self.linger_s = max(0.0, linger_ms) / 1000.0
        self.max_items = max_items
        self._gate: contextlib.AbstractAsyncContextManager[object] = (
            write_gate if write_gate is not None else contextlib.nullcontext()
        )
        self._waiting: list[_Batch] = []
        self._waiting_items = 0
        self._flush: asyncio.TimerHandle | asyncio.Handle | None = None
        self._sending: set[asyncio.Task[None]] = set()  # held here: the loop keeps weak refs
        #: Transactions sent, and batches they carried (a batch sent again alone counts again).
        self.transactions = 0
        self.batches = 0

    async def commit(self, fence: Fence, items: Sequence[Item]) -> Committed:
        """Writes ``items`` under ``fence``, joined with whatever other batches come within the
        linger. Raises :class:`TxnRejected` when this batch alone is malformed, and whatever
        the store raises when the outcome is unknown."""
        if len(items) >= self.max_items:
            return await self._alone(fence, items)
        if self._waiting_items + len(items) > self.max_items:
            self._send_now()
        batch = _Batch(fence, items)
        self._waiting.append(batch)
        self._waiting_items += len(items)
        if self._waiting_items >= self.max_items:
            self._send_now()
        elif self._flush is None:
            loop = asyncio.get_running_loop()
            self._flush = (
                loop.call_later(self.linger_s, self._send_now)
                if self.linger_s
                else loop.call_soon(self._send_now)
            )
        return await batch.done

    def _send_now(self) -> None:
        if self._flush is not None:
            self._flush.cancel()
            self._flush = None
        group, self._waiting, self._waiting_items = self._waiting, [], 0
        if group:
            task = asyncio.get_running_loop().create_task(self._send(group))
            self._sending.add(task)
            task.add_done_callback(self._sending.discard)

    async def _send(self, group: list[_Batch]) -> None:
        if len(group) == 1:
            await self._settle_alone(group[0])
            return
        compares = [b.fence.compare(self.kv.ops) for b in _distinct_fences(group)]
        ops = [item for b in group for item in b.items]
        try:
            async with self._gate:
                self.transactions += 1
                self.batches += len(group)
                resp = await self.kv.txn(compares, ops)
        except TxnRejected:
            resp = None  # some batch (or two together) is malformed: each goes alone
        except BaseException as exc:
            for b in group:
                _fail(b, exc)
            if not isinstance(exc, Exception):
                raise
            return
        if resp is None or not resp.succeeded:
            # Nothing was written: each batch goes alone, and learns its own fate.
            await asyncio.gather(*(self._settle_alone(b) for b in group))
            return
        outcomes = resp.nested_outcomes()
        start = 0
        for b in group:
            end = start + len(b.items)
            _succeed(b, Committed(True, outcomes[start:end], resp.revision))
            start = end

    async def _settle_alone(self, batch: _Batch) -> None:
        try:
            _succeed(batch, await self._alone(batch.fence, batch.items))
        except Exception as exc:  # the batch's caller gets it
            _fail(batch, exc)

    async def _alone(self, fence: Fence, items: Sequence[Item]) -> Committed:
        self.transactions += 1
        self.batches += 1
        return await commit_alone(self.kv, fence, items, self._gate)


async def commit_alone(
    kv: KV,
    fence: Fence,
    items: Sequence[Item],
    gate: contextlib.AbstractAsyncContextManager[object],
) -> Committed:
    """``items`` in one transaction of their own under ``fence`` (``gate`` held while it is in
    flight). Raises what the store raises (:class:`TxnRejected` included)."""
    async with gate:
        resp = await kv.txn([fence.compare(kv.ops)], items)
    if not resp.succeeded:
        return Committed(False, [], 0)
    return Committed(True, resp.nested_outcomes(), resp.revision)


def _succeed(batch: _Batch, committed: Committed) -> None:
    """Tells a batch's caller what was written, unless it stopped waiting (cancelled: its
    partition stopped): the others of its group must still hear theirs."""
    if not batch.done.done():
        batch.done.set_result(committed)


def _fail(batch: _Batch, exc: BaseException) -> None:
    """Tells a batch's caller its write failed (see :func:`_succeed`)."""
    if not batch.done.done():
        batch.done.set_exception(exc)


def _distinct_fences(group: Sequence[_Batch]) -> list[_Batch]:
    seen: set[tuple[int, int]] = set()
    out = []
    for b in group:
        key = (b.fence.partition, b.fence.epoch)
        if key not in seen:
            seen.add(key)
            out.append(b)
    return out

"""A small model of claiming fires and re-tokening, run by each simulated owner.

Per partition ``p`` one job fires every ``fire_every_s`` (fire ``k`` is due at
``k * fire_every_s`` after the simulation started). The owner, on each tick:

1. hands results of executions it dispatched earlier back as a worker would: one
   compare-and-delete on the execution's *token* only (no fence: results come from workers),
   writing ``done/k`` with that token;
2. right after acquiring ``p`` (or after an unknown outcome), re-tokens every live
   execution of ``p`` with a fenced rewrite compared on its token, since the previous owner
   may already have sent it out; the rewrite's revision is the new token;
3. otherwise claims every due fire in one fenced transaction: the cursor moves (compared on
   its mod revision) and each ``run/k`` is created if absent; the claim's revision is the
   token.

This mirrors the design (fenced claim, token = revision of the write that handed the
execution out, re-token on takeover, results compared on the token) in a few keys; it is a
model, not the node's partition code (``schedd.node`` and ``PartitionStore.claim_fire`` over
job specs and schedules are not simulated).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from schedd._errors import Unavailable
from schedd.coord import Fence
from schedd.store import KV, prefix_end
from schedd.store._owner import Item, PartitionStore
from sim._keys import KEYS, cursor_key, done_key, parse_fire_key, run_key, runs_prefix


@dataclass
class FireRunner:
    """One node's executions: what it dispatched (by (p, k): token) and which fences it
    has re-tokened under."""

    node_id: str
    fire_every_s: float
    outstanding: dict[tuple[int, int], int] = field(default_factory=dict)
    retokened: set[Fence] = field(default_factory=set)

    async def results(self, kv: KV) -> None:
        """Workers report every dispatched execution finished (compared on the token)."""
        if not self.outstanding:
            return
        o = kv.ops
        items = []
        for (p, k), token in sorted(self.outstanding.items()):
            run = run_key(p, k)
            items.append(
                o.txn(
                    [o.cmp_mod(run, token)], [o.delete(run), o.put(done_key(p, k), b"%d" % token)]
                )
            )
        await kv.txn([], items)
        self.outstanding.clear()  # done, or re-tokened by someone else: no longer ours

    async def tick(self, kv: KV, fence: Fence, now_s: float, extra: Item) -> None:
        """Re-tokens (first) or claims due fires of ``fence``'s partition, in one fenced
        batch with ``extra`` (the node's ledger append).

        Raises:
            FencedOut: the fence no longer holds; nothing was written.
            Unavailable: the outcome is unknown; live executions are re-read next time.
        """
        store = PartitionStore(kv, KEYS, fence)
        try:
            if fence not in self.retokened:
                await self._retoken(kv, store, fence, extra)
                self.retokened.add(fence)
            else:
                await self._claim(kv, store, fence.partition, now_s, extra)
        except Unavailable:
            self.retokened.discard(fence)
            raise

    async def _retoken(self, kv: KV, store: PartitionStore, fence: Fence, extra: Item) -> None:
        o = kv.ops
        start = runs_prefix(fence.partition)
        runs, _, _ = await kv.range(start, prefix_end(start))
        items = [
            Item(o.txn([o.cmp_mod(r.key, r.mod_revision)], [o.put(r.key, self.node_id.encode())]))
            for r in runs
        ]
        applied = await store.apply([*items, extra])
        for r, ok, revision in zip(runs, applied.ok, applied.revisions, strict=False):
            if ok:
                self.outstanding[parse_fire_key(r.key)] = revision

    async def _claim(
        self, kv: KV, store: PartitionStore, p: int, now_s: float, extra: Item
    ) -> None:
        o = kv.ops
        cursor = await kv.get(cursor_key(p))
        first = int(cursor.value) if cursor is not None else 0
        due = int(now_s // self.fire_every_s) + 1  # fires 0..due-1 are due
        if first >= due:
            await store.apply([extra])
            return
        fires = range(first, due)
        compares = [
            o.cmp_mod(cursor.key, cursor.mod_revision)
            if cursor is not None
            else o.cmp_create(cursor_key(p), 0),
            *(o.cmp_create(run_key(p, k), 0) for k in fires),
        ]
        ops = [
            o.put(cursor_key(p), b"%d" % due),
            *(o.put(run_key(p, k), self.node_id.encode()) for k in fires),
        ]
        applied = await store.apply([Item(o.txn(compares, ops)), extra])
        if applied.ok[0]:
            for k in fires:
                self.outstanding[(p, k)] = applied.revisions[0]

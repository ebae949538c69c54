"""The invariants, checked against what the store committed (never against what nodes say).

The checker reads the store's committed history with :meth:`MemoryKV.changes_after` (no
yield, no faults) and keeps its own copy of ``owners/``. It checks:

1. **At most one valid owner per partition.** A node's fence for ``p`` is valid iff
   ``create_revision(owners/p) == epoch`` now. Several nodes may *believe* they own ``p``, but
   at most one of their fences may be valid, and a node whose fence is invalid must drop it
   within ``learn_bound_s`` of clock time during which it ran (a paused node cannot learn).
2. **Stale epochs write nothing.** Every ledger write the store applied carried an epoch that
   was the owner key's create revision at that revision, so per partition the ledger's epochs
   never go backwards and nothing is written under an epoch after a higher one wrote.
   Owner keys are re-created only with higher create revisions.
3. **Fires once, tokens only grow** (:mod:`sim._fires`): each ``run/k`` is created once,
   every rewrite gives it a higher token, ``done/k`` is written once and with the token
   that was current.
4. **Liveness** (:meth:`Checker.check_settled`, after faults stop and the cluster was quiet
   for a few TTLs): every partition has exactly one owner, a live eligible node that believes
   it at that epoch, and no node owns more than ``ceil(P / live eligible nodes)``; every
   fire due when ownership had settled is done three work intervals later.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from schedd.store import KeyValue, MemoryKV
from sim._keys import FIRES_PREFIX, KEYS, LEDGER_PREFIX, parse_fire_key, parse_ledger_key
from sim._node import SimNode


class Violation(AssertionError):
    """An invariant failed."""


class Checker:
    """Follows the store's history and checks the invariants (see the module docstring)."""

    def __init__(self, kv: MemoryKV, partitions: int, learn_bound_s: float) -> None:
        self._kv = kv
        self.partitions = partitions
        self.learn_bound_s = learn_bound_s
        self.revision = 0
        self.owners: dict[int, KeyValue] = {}
        self.last_epoch: dict[int, int] = {}  # partition -> highest epoch created
        self.ledger_epoch: dict[int, int] = {}  # partition -> highest epoch written under
        self.ledger_writes = 0
        self.claimed: set[tuple[int, int]] = set()
        self.tokens: dict[tuple[int, int], int] = {}  # (p, fire) -> current token
        self.done: set[tuple[int, int]] = set()
        self.slowest_learn_s = 0.0
        self._owners_prefix = KEYS.owners_prefix()

    def observe(self) -> None:
        """Checks every change committed since the last call (invariant 2)."""
        for revision, events in self._kv.changes_after(self.revision):
            for ev in events:  # compares held against the state before this revision
                if ev.kind == "put" and ev.kv.key.startswith(LEDGER_PREFIX):
                    self._ledger_write(revision, parse_ledger_key(ev.kv.key), int(ev.kv.value))
            for ev in events:
                if ev.kv.key.startswith(self._owners_prefix):
                    self._owner_change(revision, ev.kind, ev.kv)
                elif ev.kind == "put" and ev.kv.key.startswith(FIRES_PREFIX):
                    self._fire_write(revision, ev.kv)
            self.revision = revision

    def _ledger_write(self, revision: int, p: int, epoch: int) -> None:
        self.ledger_writes += 1
        owner = self.owners.get(p)
        if owner is None or owner.create_revision != epoch:
            now = owner.create_revision if owner else "none"
            raise Violation(
                f"r{revision}: ledger write to p{p} under epoch {epoch}, owner epoch {now}"
            )
        if epoch < self.ledger_epoch.get(p, 0):
            raise Violation(
                f"r{revision}: ledger of p{p} went back from epoch "
                f"{self.ledger_epoch[p]} to {epoch}"
            )
        self.ledger_epoch[p] = epoch

    def _fire_write(self, revision: int, kv: KeyValue) -> None:
        if kv.key.endswith(b"/cursor"):
            return
        fire = parse_fire_key(kv.key)
        if b"/run/" in kv.key:
            if kv.version == 1:
                if fire in self.claimed:
                    raise Violation(f"r{revision}: fire {fire} claimed a second time")
                self.claimed.add(fire)
            if kv.mod_revision <= self.tokens.get(fire, 0):
                raise Violation(f"r{revision}: token of {fire} did not grow")
            self.tokens[fire] = kv.mod_revision
            return
        if fire in self.done:
            raise Violation(f"r{revision}: fire {fire} finished a second time")
        token = int(kv.value)
        if token != self.tokens.get(fire):
            raise Violation(
                f"r{revision}: {fire} finished under token {token}, current {self.tokens.get(fire)}"
            )
        self.done.add(fire)

    def _owner_change(self, revision: int, kind: str, kv: KeyValue) -> None:
        p = KEYS.parse_owner_key(kv.key)
        if kind == "delete":
            self.owners.pop(p, None)
            return
        if p not in self.owners:
            if kv.create_revision <= self.last_epoch.get(p, 0):
                raise Violation(f"r{revision}: p{p} re-created at epoch {kv.create_revision}")
            self.last_epoch[p] = kv.create_revision
        self.owners[p] = kv

    def check_beliefs(self, nodes: Sequence[SimNode]) -> None:
        """Invariant 1, for the current state."""
        holders: dict[int, list[str]] = {}
        for node in nodes:
            if node.status == "crashed":
                continue  # a dead process believes nothing anyone can observe
            seen = set()
            for p, fence in sorted(node.believed.items()):
                owner = self.owners.get(p)
                if owner is not None and owner.create_revision == fence.epoch:
                    if owner.value.decode() != node.node_id:
                        raise Violation(f"{node.node_id} holds p{p}@{fence.epoch} owned by {owner}")
                    holders.setdefault(p, []).append(node.node_id)
                    continue
                seen.add(fence)
                since = node.invalid_since.setdefault(fence, node.running_s)
                late = node.running_s - since
                self.slowest_learn_s = max(self.slowest_learn_s, late)
                if late > self.learn_bound_s:
                    raise Violation(
                        f"{node.node_id} still believes p{p}@{fence.epoch} after {late:.2f}s "
                        f"of running since it became invalid"
                    )
            for fence in [f for f in node.invalid_since if f not in seen]:
                del node.invalid_since[fence]
        for p, ids in sorted(holders.items()):
            if len(ids) > 1:
                raise Violation(f"p{p} has {len(ids)} valid owners: {ids}")

    def check_settled(self, nodes: Sequence[SimNode]) -> None:
        """Invariant 4: one valid, believed owner per partition, shares within the target."""
        live = {n.node_id: n for n in nodes if n.live}
        assert all(n.membership is not None for n in live.values())
        eligible = {i for i, n in live.items() if n.membership and n.membership.info.eligible}
        if not eligible:
            raise Violation(f"no live eligible node after the quiet period (live: {sorted(live)})")
        share = math.ceil(self.partitions / len(eligible))
        for p in range(self.partitions):
            owner = self.owners.get(p)
            if owner is None:
                raise Violation(f"p{p} has no owner after the quiet period")
            node = live.get(owner.value.decode())
            if node is None or node.node_id not in eligible:
                raise Violation(f"p{p} is owned by {owner.value!r}, not a live eligible node")
            session = node.session
            assert session is not None
            fence = node.believed.get(p)
            if (
                owner.lease != session.lease_id
                or fence is None
                or fence.epoch != owner.create_revision
            ):
                raise Violation(f"p{p}: {node.node_id} does not hold its owner key {owner}")
        for node_id, node in sorted(live.items()):
            if len(node.believed) > share:
                raise Violation(f"{node_id} owns {len(node.believed)} > ceil(P/n) = {share}")

    def check_fires_done(self, fires_due: int) -> None:
        """Invariant 4, fires: ``0..fires_due-1`` of every partition are done."""
        missing = [(p, k) for p in range(self.partitions) for k in range(fires_due)]
        missing = [fire for fire in missing if fire not in self.done]
        if missing:
            raise Violation(f"fires due when ownership settled are not done: {missing[:8]}")

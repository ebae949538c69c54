"""The partition owner's side of jobs that run after others (see ``store/_deps.py``).

When an execution of a job with children ends for good (SUCCEEDED; or DEAD, MISSED, SKIPPED,
CANCELLED), the write that ends it also puts, for each child C, an **arrival**
``arrive/{p(C)}/{C}/{T}/{parent}``: ``ok``, or ``skip:{reason}``. The key names the parent's
execution (its job and fire T) and the child, so it has one writer, the parent's partition
owner, under that partition's fence; and it is written in the same transaction as the
parent's result, so a result never ends without its hand-off, through any crash.

The owner of C's partition reads the arrivals of (C, T) and, once every parent arrived
``ok``, starts ``C@T``: one fenced transaction creates the execution (it must not exist
yet: nothing runs twice), with a RUN due entry at now, and deletes the arrivals. Once a
parent arrived ``skip``, ``C@T`` is recorded SKIPPED and the skip goes on to C's children
(marked by ``dskip/{p}/{C}/{T}``, so it is told once); the arrivals stay, so a parent that
is redriven and then succeeds makes C go after all.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from schedd.store._keys import Keys, partition_of
from schedd.store._owner import Item
from schedd.store._records import new_run
from schedd.store._types import KeyValue, prefix_end
from schedd.store.abc import KV, Op
from schedd.v1 import execution_pb2, job_pb2

OK = b"ok"
SKIP = b"skip:"


@dataclass
class Waiting:
    """What arrived for one child's execution of one root fire."""

    child: str
    fire_ms: int
    #: parent -> the arrival (its value: ``ok`` or ``skip:...``, and its revision).
    arrived: dict[str, KeyValue] = field(default_factory=dict)
    #: Its skip was told on (``dskip/``), if so.
    skipped: KeyValue | None = None

    def skip_reason(self) -> str | None:
        """Why it is skipped (the first parent that did not succeed), or None."""
        for _, kv in sorted(self.arrived.items()):
            if kv.value.startswith(SKIP):
                return kv.value[len(SKIP) :].decode(errors="replace")
        return None

    def ready(self, parents: Sequence[str]) -> bool:
        """Every parent arrived ``ok``."""
        return all(p in self.arrived and self.arrived[p].value == OK for p in parents)


class Arrivals:
    """Builds and reads one partition's arrivals."""

    def __init__(
        self,
        kv: KV,
        keys: Keys,
        partition: int,
        partitions: int,
        encode: Callable[[execution_pb2.Execution], bytes],
    ) -> None:
        self.kv = kv
        self.encode = encode  # an execution as the store keeps it (sealed, when it has secrets)
        self.ops = kv.ops
        self.keys = keys
        self.partition = partition
        self.partitions = partitions

    def tell(self, parent: job_pb2.Job, fire_ms: int, outcome: bytes) -> list[Op]:
        """The arrivals of ``parent``'s execution for ``fire_ms`` at each of its children."""
        put, key = self.ops.put, self.keys.arrive_key
        return [
            put(key(partition_of(c, self.partitions), c, fire_ms, parent.id), outcome)
            for c in parent.children
        ]

    async def read(self, child: str | None = None) -> dict[tuple[str, int], Waiting]:
        """This partition's arrivals (of one child, or all) and skip marks, by (child, T)."""
        k = self.keys
        start = k.arrive_prefix(self.partition)
        mark = k.prefix + b"dskip/%04d/" % self.partition
        if child is not None:
            start += child.encode() + b"/"
            mark += child.encode() + b"/"
        arrived, _ = await self.kv.range_all(start, prefix_end(start))
        marks, _ = await self.kv.range_all(mark, prefix_end(mark))
        out: dict[tuple[str, int], Waiting] = {}
        for kv in arrived:
            _, c, fire, parent = k.parse_arrive_key(kv.key)
            out.setdefault((c, fire), Waiting(c, fire)).arrived[parent] = kv
        for kv in marks:
            c, _, at = kv.key[len(k.prefix) + len(b"dskip/0000/") :].decode().rpartition("/")
            w = out.get((c, int(at)))
            if w is None:  # its arrivals went (the job was deleted): the mark goes too
                w = out[(c, int(at))] = Waiting(c, int(at))
            w.skipped = kv
        return out

    def start(self, w: Waiting, spec_revision: int, ex: execution_pb2.Execution) -> Item:
        """Creates the child's execution for the fire (due now, claimed like a trigger) and
        consumes the arrivals; compared on each of them and on the child's spec."""
        o = self.ops
        run = new_run(o, self.keys, ex, self.encode(ex))
        compares = [
            o.cmp_mod(self.keys.job_key(w.child), spec_revision),
            *run.compares,
            *(o.cmp_mod(kv.key, kv.mod_revision) for kv in w.arrived.values()),
        ]
        return Item(o.txn(compares, [*run.ops, *self._consume(w)]))

    def skip(self, w: Waiting, reason: str, child: job_pb2.Job | None) -> Item:
        """Marks the child's execution for the fire skipped and tells its children."""
        o, k = self.ops, self.keys
        mark = k.dskip_key(self.partition, w.child, w.fire_ms)
        ops = [o.put(mark, reason.encode())]
        if child is not None:
            ops += self.tell(child, w.fire_ms, SKIP + f"{child.id} skipped: {reason}".encode())
        return Item(o.txn([o.cmp_create(mark, 0)], ops))

    def drop(self, w: Waiting) -> Item:
        """Removes what arrived (and the skip mark) for a child that no longer exists, or
        whose skip is too old for a redrive of its parent to carry on."""
        compares = [self.ops.cmp_mod(kv.key, kv.mod_revision) for kv in w.arrived.values()]
        return Item(self.ops.txn(compares, self._consume(w)))

    def _consume(self, w: Waiting) -> list[Op]:
        ops = [self.ops.delete(kv.key) for kv in w.arrived.values()]
        if w.skipped is not None:
            ops.append(self.ops.delete(w.skipped.key))
        return ops

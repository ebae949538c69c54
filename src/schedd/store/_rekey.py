"""Re-encrypting every record with the newest key (``schedd keys rekey``).

What is rewritten, each compared on its mod revision (a concurrent change fails the compare;
the record is read again and retried), so nothing newer is ever overwritten:

- ``jobs/``: the spec (its version changes; ``notify/{p}`` names it, so its owner re-reads it
  at once, as after an update);
- ``dlq/``: dead letters;
- ``runs/``: only executions waiting on a ``r`` due entry (a retry's wait, a trigger, a
  backfill, a redrive not yet claimed), compared on that entry too. Nothing has those in
  flight, and their claim reads them afresh. The others may be on a worker under a token
  that is their key's mod revision: they are *left*, and take the new key when their owner
  next writes them (a retry, a redelivery); they leave etcd when they finish;
- ``ckpt/``: the checkpoint of a live run, compared on the run key too; one its run key has
  superseded, or whose run is gone, is deleted (it would never be read).

Plaintext secrets (written before encryption was turned on) are encrypted the same way. When
no record is left under an older key, ``meta/encryption`` keeps only the active key; else the
keys still in use stay, and the summary names them: run it again later.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from schedd._errors import Undecryptable
from schedd.store._envelope import Keyring, is_sealed, key_id_of
from schedd.store._keys import Keys, partition_of
from schedd.store._keys_in_use import (
    KeysInUse,
    prepare_keyring,
    read_keys_in_use,
    write_keys_in_use,
)
from schedd.store._notify import Notice
from schedd.store._records import RUN, DueEntry, decode_execution
from schedd.store._sealing import (
    Sealer,
    checkpoint_field,
    key_ids_in_execution,
    key_ids_in_job,
)
from schedd.store._types import KeyValue, prefix_end
from schedd.store.abc import KV, Compare, Op
from schedd.v1 import job_pb2

#: Keys read per page, and rewritten per transaction: with a ``notify/`` put per partition
#: touched, at most 128 operations, etcd's default ``--max-txn-ops``.
PAGE = 64
#: Reads and compare-and-swaps of one record before it is counted as failed.
TRIES = 5


@dataclass
class RekeySummary:
    """What a rekey did.

    Attributes:
        read: records read that may hold secrets (jobs, runs, checkpoints, dead letters).
        rewritten: encrypted anew with the active key (plaintext ones too).
        current: already under the active key, or with no secret.
        removed: checkpoints deleted (superseded by their run key, or their run is gone).
        left: live executions left as they are (they may be on a worker).
        undecryptable: records whose secrets do not open with this keyring.
        retried: compare-and-swaps that failed on a concurrent change and were retried.
        failed: records that kept changing through every try (left as they were).
        in_use: key id -> records still under it afterwards, besides the active key.
        dropped: key ids removed from ``meta/encryption``.
    """

    read: int = 0
    rewritten: int = 0
    current: int = 0
    removed: int = 0
    left: int = 0
    undecryptable: int = 0
    retried: int = 0
    failed: int = 0
    in_use: Counter[str] = field(default_factory=Counter)
    dropped: list[str] = field(default_factory=list)

    def progress(self) -> str:
        return f"{self.read} records read, {self.rewritten} rewritten, {self.current} current"

    def line(self) -> str:
        """One line: what was read and done, and what stays under which key."""
        text = (
            f"{self.read} records read: {self.rewritten} rewritten, {self.current} already"
            f" current, {self.removed} stale checkpoints removed, {self.left} live executions"
            f" left, {self.undecryptable} undecryptable, {self.failed} failed"
            f" ({self.retried} retries)"
        )
        if self.in_use:
            still = ", ".join(f"{k or 'plaintext'}: {n}" for k, n in sorted(self.in_use.items()))
            text += f"; still in use: {still} (run rekey again once they finish)"
        if self.dropped:
            text += f"; keys no longer in use: {', '.join(self.dropped)}"
        return text


@dataclass
class _Plan:
    """What to do with one record: compares and ops of one nested transaction (none: nothing
    to do), and the partition whose owner must re-read the job."""

    compares: list[Compare] = field(default_factory=list)
    ops: list[Op] = field(default_factory=list)
    notify: tuple[int, str] | None = None
    removes: bool = False  # a stale checkpoint's delete


class Rekeyer:
    """Rewrites every record of one cluster (one key prefix) under the keyring's active key."""

    def __init__(
        self,
        kv: KV,
        keys: Keys,
        keyring: Keyring,
        partitions: int,
        *,
        progress: Callable[[RekeySummary], None] | None = None,
    ) -> None:
        self.kv = kv
        self.ops = kv.ops
        self.keys = keys
        self.keyring = keyring
        self.active = keyring.active.key_id
        self.partitions = partitions
        self.sealer = Sealer(keyring)
        self.summary = RekeySummary()
        self._progress = progress
        self._ids_at_start: set[str] = set()

    async def run(self) -> RekeySummary:
        """Checks the keyring (see :func:`prepare_keyring`), rewrites, then drops the key ids
        no record uses any more from ``meta/encryption``.

        Raises:
            EncryptionKeyError: the keyring lacks a key in use, or has a wrong one.
            Unavailable: etcd failed (what was rewritten stays rewritten; run it again).
        """
        # Only these may be dropped at the end: a key a node adds meanwhile is its to use.
        self._ids_at_start = set((await prepare_keyring(self.kv, self.keys, self.keyring)).ids())
        k = self.keys
        for prefix in (k.jobs_prefix(), k.dlq_prefix(), k.runs_all_prefix(), k.prefix + b"ckpt/"):
            await self._prefix(prefix)
        await self._drop_unused()
        return self.summary

    async def _prefix(self, prefix: bytes) -> None:
        start, end = prefix, prefix_end(prefix)
        while True:
            kvs, _, more = await self.kv.range(start, end, limit=PAGE)
            if kvs:
                self.summary.read += len(kvs)
                await self._rewrite(kvs)
                if self._progress is not None:
                    self._progress(self.summary)
                start = kvs[-1].key + b"\x00"
            if not more or not kvs:
                return

    async def _rewrite(self, kvs: Sequence[KeyValue]) -> None:
        pending = list(kvs)
        for attempt in range(TRIES):
            plans = await self._plan(pending)
            todo = [(kv, p) for kv, p in zip(pending, plans, strict=True) if p.ops]
            if not todo:
                return
            nested = [self.ops.txn(p.compares, p.ops) for _, p in todo]
            changed: dict[int, list[str]] = {}
            for _, p in todo:
                if p.notify is not None:
                    changed.setdefault(p.notify[0], []).append(p.notify[1])
            notify = [
                self.ops.put(self.keys.notify_key(part), Notice(ids).encode())
                for part, ids in sorted(changed.items())
            ]
            resp = await self.kv.txn([], nested + notify)
            again: list[KeyValue] = []
            for n, (kv, plan) in enumerate(todo):
                if resp.txn_succeeded(n):
                    self._done(plan)
                else:
                    again.append(kv)
            if not again:
                return
            if attempt == TRIES - 1:
                self.summary.failed += len(again)
                return
            self.summary.retried += len(again)
            fresh = await self.kv.get_many([kv.key for kv in again])
            pending = [kv for kv in fresh if kv is not None]

    def _done(self, plan: _Plan) -> None:
        if plan.removes:
            self.summary.removed += 1
        else:
            self.summary.rewritten += 1

    async def _plan(self, kvs: Sequence[KeyValue]) -> list[_Plan]:
        k = self.keys
        if not kvs:
            return []
        first = kvs[0].key
        if first.startswith(k.jobs_prefix()):
            return [self._plan_job(kv) for kv in kvs]
        if first.startswith(k.dlq_prefix()):
            return [self._plan_execution(kv, []) for kv in kvs]
        if first.startswith(k.runs_all_prefix()):
            return await self._plan_runs(kvs)
        return await self._plan_checkpoints(kvs)

    # -- per kind -----------------------------------------------------------------------------

    def _current(self, ids: set[str]) -> bool:
        return ids <= {self.active}

    def _undecryptable(self, exc: Undecryptable) -> _Plan:
        self.summary.undecryptable += 1
        self.summary.in_use[exc.key_id] += 1
        return _Plan()

    def _plan_job(self, kv: KeyValue) -> _Plan:
        job = job_pb2.Job.FromString(kv.value)
        if self._current(key_ids_in_job(job)):
            self.summary.current += 1
            return _Plan()
        try:
            self.sealer.open_job(job)
        except Undecryptable as exc:
            return self._undecryptable(exc)
        return _Plan(
            [self.ops.cmp_mod(kv.key, kv.mod_revision)],
            [self.ops.put(kv.key, self.sealer.job_value(job))],
            (partition_of(job.id, self.partitions), job.id),
        )

    def _plan_execution(self, kv: KeyValue, compares: list[Compare]) -> _Plan:
        ex = decode_execution(kv.value, 0)
        if self._current(key_ids_in_execution(ex)):
            self.summary.current += 1
            return _Plan()
        try:
            ex = self.sealer.read_execution(kv.value, 0)
        except Undecryptable as exc:
            return self._undecryptable(exc)
        compares = [self.ops.cmp_mod(kv.key, kv.mod_revision), *compares]
        return _Plan(compares, [self.ops.put(kv.key, self.sealer.execution_value(ex))])

    async def _plan_runs(self, kvs: Sequence[KeyValue]) -> list[_Plan]:
        runs = [decode_execution(kv.value, kv.mod_revision) for kv in kvs]
        due_keys = [
            self.keys.run_due_key(ex.partition, ex.due_ms, ex.job_id, ex.scheduled_ms)
            for ex in runs
        ]
        dues = await self.kv.get_many(due_keys)
        plans = []
        for kv, ex, due in zip(kvs, runs, dues, strict=True):
            ids = key_ids_in_execution(ex)
            waiting = due is not None and due.value == DueEntry.encode_value(RUN, ex.scheduled_ms)
            if self._current(ids) or waiting:
                compares = [self.ops.cmp_mod(due.key, due.mod_revision)] if due else []
                plans.append(self._plan_execution(kv, compares))
            else:  # it may be on a worker: its key's mod revision is its token
                self.summary.left += 1
                for key_id in ids - {self.active}:
                    self.summary.in_use[key_id] += 1
                plans.append(_Plan())
        return plans

    async def _plan_checkpoints(self, kvs: Sequence[KeyValue]) -> list[_Plan]:
        ckpt_all = self.keys.prefix + b"ckpt/"
        # ckpt/{p}/{job}/{sched} and runs/{p}/{job}/{sched}: the same tail.
        run_keys = [self.keys.runs_all_prefix() + kv.key[len(ckpt_all) :] for kv in kvs]
        found = await self.kv.get_many(run_keys)
        plans = []
        for kv, run_key, run in zip(kvs, run_keys, found, strict=True):
            o = self.ops
            if run is None or run.mod_revision > kv.mod_revision:  # never read again
                guard = (
                    o.cmp_create(run_key, 0)
                    if run is None
                    else o.cmp_mod(run_key, run.mod_revision)
                )
                compares = [o.cmp_mod(kv.key, kv.mod_revision), guard]
                plans.append(_Plan(compares, [o.delete(kv.key)], removes=True))
                continue
            key_id = key_id_of(kv.value) if is_sealed(kv.value) else ""
            if key_id == self.active or not kv.value:
                self.summary.current += 1
                plans.append(_Plan())
                continue
            ex = decode_execution(run.value, run.mod_revision)
            try:
                ex.checkpoint = self.sealer.open(
                    kv.value, ex.job_id, checkpoint_field(ex.scheduled_ms)
                )
            except Undecryptable as exc:
                plans.append(self._undecryptable(exc))
                continue
            compares = [o.cmp_mod(kv.key, kv.mod_revision), o.cmp_mod(run_key, run.mod_revision)]
            plans.append(_Plan(compares, [o.put(kv.key, self.sealer.checkpoint_value(ex))]))
        return plans

    # -- the record of keys in use --------------------------------------------------------------

    async def _drop_unused(self) -> None:
        for _ in range(TRIES):
            record = await read_keys_in_use(self.kv, self.keys)
            keep = {self.active, *self.summary.in_use}
            unused = [i for i in record.ids() if i in self._ids_at_start and i not in keep]
            if not unused:
                return
            canaries = {i: c for i, c in record.canaries.items() if i not in unused}
            written = await write_keys_in_use(
                self.kv, self.keys, KeysInUse(canaries), record.revision
            )
            if written is not None:
                self.summary.dropped = unused
                return


async def rekey(
    kv: KV,
    keys: Keys,
    keyring: Keyring,
    partitions: int,
    *,
    progress: Callable[[RekeySummary], None] | None = None,
) -> RekeySummary:
    """Rewrites every record of the cluster under ``keyring``'s active key (see the module
    docstring); returns what it did."""
    return await Rekeyer(kv, keys, keyring, partitions, progress=progress).run()

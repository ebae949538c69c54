"""Finished executions, kept on the node that finished them, in RocksDB (rocksdict).

Keys (raw bytes, big-endian-ordered text so that key order is the order we list in)::

    e/{execution_id}                          -> Execution protobuf
    j/{job_id}/{inverted sched:013d}          -> execution id   (one job, newest first)
    s/{inverted sched:013d}/{execution_id}    -> b""            (every job, newest first)
    t/{finished_ms:013d}/{execution_id}       -> b""            (for TTL pruning)
    m/s-index                                 -> b"1"           (the s/ index is complete)

Both listing indexes follow :func:`~schedd.history._order.list_order` (scheduled time
descending, then id ascending), so a page resumes with a seek to the cursor, not a scan of
everything before it. etcd holds only live executions; this holds the rest, so etcd does not
grow with history. A node keeps what it settled: after a restart it still lists it, and after
its partitions moved the cluster-wide listing (``node/_views.py``) still finds it here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path

from rocksdict import WriteBatch

from schedd._rocksdb import open_rocksdb
from schedd.history._order import Position, comes_after
from schedd.v1 import execution_pb2

_MAX_MS = 9_999_999_999_999
_S_INDEX_DONE = b"m/s-index"
#: Deletes per RocksDB write batch while pruning (one batch never holds a whole history).
_PRUNE_BATCH = 1000


def _upper(prefix: bytes) -> bytes:
    return prefix[:-1] + bytes([prefix[-1] + 1])


def _inv(ms: int) -> int:
    return _MAX_MS - ms


def _s_key(ex: execution_pb2.Execution) -> bytes:
    return b"s/%013d/%s" % (_inv(ex.scheduled_ms), ex.id.encode())


def _j_key(ex: execution_pb2.Execution) -> bytes:
    return b"j/%s/%013d" % (ex.job_id.encode(), _inv(ex.scheduled_ms))


def _serialize(ex: execution_pb2.Execution) -> bytes:
    return ex.SerializeToString()


class History:
    """Append-mostly store of finished executions with a TTL.

    ``encode`` and ``decode`` turn an execution into its stored ``e/`` value and back (the
    node's seal and open secret fields, see ``schedd.store.Sealer``; default: protobuf as it
    is). Whatever they do, the stored value stays an Execution protobuf whose ids and times
    read without them (indexes and pruning read it so).
    """

    def __init__(
        self,
        path: Path,
        *,
        ttl_ms: int = 7 * 86_400_000,
        encode: Callable[[execution_pb2.Execution], bytes] = _serialize,
        decode: Callable[[bytes], execution_pb2.Execution] = execution_pb2.Execution.FromString,
    ) -> None:
        self._db = open_rocksdb(path, "run history")
        self.ttl_ms = ttl_ms
        self._encode = encode
        self._decode = decode
        self._build_s_index()

    def close(self) -> None:
        self._db.close()

    def _build_s_index(self) -> None:
        """Histories written before the ``s/`` index existed get it once, at open."""
        if self._db.get(_S_INDEX_DONE) is not None:
            return
        batch = WriteBatch(raw_mode=True)
        for key, raw in self._items(b"e/"):
            del key
            batch.put(_s_key(execution_pb2.Execution.FromString(raw)), b"")
        batch.put(_S_INDEX_DONE, b"1")
        self._db.write(batch)

    def record(self, executions: Iterable[execution_pb2.Execution]) -> None:
        """Writes these finished executions in one RocksDB write batch (none: no write).

        Blind writes, no read per execution (this runs on the settle path of every fire): an
        execution recorded again with another finish time leaves its old ``t/`` entry behind,
        and :meth:`prune` deletes a record only through the entry of its stored finish time
        (a stale entry goes alone when its time comes).
        """
        batch = WriteBatch(raw_mode=True)
        put, encode = batch.put, self._encode
        n = 0
        for ex in executions:
            eid = ex.id.encode()
            put(b"e/" + eid, encode(ex))
            put(_j_key(ex), eid)
            put(_s_key(ex), b"")
            put(b"t/%013d/%s" % (ex.finished_ms, eid), b"")
            n += 1
        if n:
            self._db.write(batch)

    def get(self, execution_id: str) -> execution_pb2.Execution | None:
        raw = self._db.get(b"e/" + execution_id.encode())
        return None if raw is None else self._decode(raw)

    def _items(self, prefix: bytes, start: bytes | None = None) -> Iterator[tuple[bytes, bytes]]:
        """Key and value of every key under ``prefix`` from ``start`` on, in key order."""
        upper = _upper(prefix)
        for key, value in self._db.items(from_key=start or prefix):
            if not isinstance(key, bytes) or key >= upper:
                return
            yield key, bytes(value)

    def page(
        self,
        *,
        job_id: str = "",
        tenant: str = "",
        states: Sequence[int] = (),
        after: Position | None = None,
        limit: int = 1000,
    ) -> list[execution_pb2.Execution]:
        """Up to ``limit`` executions in list order, after ``after``, matching the filters.

        Seeks to the cursor's scheduled time in the job's index (``job_id`` given) or the
        all-jobs index, so a late page costs what it returns plus what the filters skip.
        """
        out: list[execution_pb2.Execution] = []
        if limit <= 0:
            return out
        for ex in self._walk(job_id, after):
            if not comes_after(ex, after):
                continue
            if (states and ex.state not in states) or (tenant and ex.tenant != tenant):
                continue
            out.append(ex)
            if len(out) >= limit:
                break
        return out

    def _walk(self, job_id: str, after: Position | None) -> Iterator[execution_pb2.Execution]:
        if job_id:
            prefix = b"j/" + job_id.encode() + b"/"
            start = prefix + b"%013d" % _inv(after.scheduled_ms) if after else None
            for _, eid in self._items(prefix, start):
                ex = self.get(eid.decode())
                # A job id with a "/" shares the prefix of a shorter one: not this job's.
                if ex is not None and ex.job_id == job_id:
                    yield ex
            return
        start = b"s/%013d/" % _inv(after.scheduled_ms) if after else None
        for key, _ in self._items(b"s/", start):
            ex = self.get(key[16:].decode())
            if ex is not None:
                yield ex

    def list(
        self, *, job_id: str = "", states: Sequence[int] = (), limit: int = 1000
    ) -> list[execution_pb2.Execution]:
        """The first ``limit`` executions in list order (newest scheduled first)."""
        return self.page(job_id=job_id, states=states, limit=limit)

    def prune(self, now_ms: int, *, limit: int | None = None) -> int:
        """Deletes executions finished more than the TTL ago (at most ``limit`` of them, oldest
        first); returns how many."""
        cutoff = b"t/%013d/" % max(0, now_ms - self.ttl_ms)
        batch = WriteBatch(raw_mode=True)
        n = pending = 0
        for key, _ in self._items(b"t/"):
            if key >= cutoff or (limit is not None and n >= limit):
                break
            eid = key[16:]
            raw = self._db.get(b"e/" + eid)
            if raw is not None:
                ex = execution_pb2.Execution.FromString(raw)
                # Only the entry of the record as stored: a later re-record keeps it.
                if b"%013d" % ex.finished_ms == key[2:15]:
                    batch.delete(_j_key(ex))
                    batch.delete(_s_key(ex))
                    batch.delete(b"e/" + eid)
            batch.delete(key)
            n += 1
            pending += 1
            if pending >= _PRUNE_BATCH:
                self._db.write(batch)
                batch = WriteBatch(raw_mode=True)
                pending = 0
        if pending:
            self._db.write(batch)
        return n

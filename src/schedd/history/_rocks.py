"""Finished executions, kept on the node that finished them, in RocksDB (rocksdict).

Keys (raw bytes, big-endian-ordered text so that key order is the order we list in)::

    e/{execution_id}                    -> Execution protobuf
    j/{job_id}/{inverted sched:013d}    -> execution id   (newest first per job)
    t/{finished_ms:013d}/{execution_id} -> b""            (for TTL pruning)

etcd holds only live executions; this holds the rest, so etcd does not grow with history.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

from rocksdict import WriteBatch

from schedd._rocksdb import open_rocksdb
from schedd.v1 import execution_pb2

_MAX_MS = 9_999_999_999_999


def _upper(prefix: bytes) -> bytes:
    return prefix[:-1] + bytes([prefix[-1] + 1])


class History:
    """Append-mostly store of finished executions with a TTL."""

    def __init__(self, path: Path, *, ttl_ms: int = 7 * 86_400_000) -> None:
        self._db = open_rocksdb(path, "run history")
        self.ttl_ms = ttl_ms

    def close(self) -> None:
        self._db.close()

    def record(self, executions: Iterable[execution_pb2.Execution]) -> None:
        """Writes these finished executions in one RocksDB write batch (none: no write)."""
        batch = WriteBatch(raw_mode=True)
        put = batch.put
        n = 0
        for ex in executions:
            eid = ex.id.encode()
            put(b"e/" + eid, ex.SerializeToString())
            put(b"j/%s/%013d" % (ex.job_id.encode(), _MAX_MS - ex.scheduled_ms), eid)
            put(b"t/%013d/%s" % (ex.finished_ms, eid), b"")
            n += 1
        if n:
            self._db.write(batch)

    def get(self, execution_id: str) -> execution_pb2.Execution | None:
        raw = self._db.get(b"e/" + execution_id.encode())
        return None if raw is None else execution_pb2.Execution.FromString(raw)

    def _scan(self, prefix: bytes, limit: int) -> list[tuple[bytes, bytes]]:
        upper = _upper(prefix)
        out: list[tuple[bytes, bytes]] = []
        for key, value in self._db.items(from_key=prefix):
            if not isinstance(key, bytes) or key >= upper or len(out) >= limit:
                break
            out.append((key, bytes(value)))
        return out

    def list(
        self, *, job_id: str = "", states: Sequence[int] = (), limit: int = 1000
    ) -> list[execution_pb2.Execution]:
        """Newest scheduled first for one job; for all jobs, most recently finished first."""
        out: list[execution_pb2.Execution] = []
        if job_id:
            for _, eid in self._scan(b"j/" + job_id.encode() + b"/", limit * 4):
                ex = self.get(eid.decode())
                if ex is not None and (not states or ex.state in states):
                    out.append(ex)
                    if len(out) >= limit:
                        break
            return out
        rows = self._scan(b"t/", 1_000_000)
        for key, _ in reversed(rows):
            ex = self.get(key[16:].decode())
            if ex is not None and (not states or ex.state in states):
                out.append(ex)
                if len(out) >= limit:
                    break
        return out

    def prune(self, now_ms: int) -> int:
        """Deletes executions finished more than the TTL ago; returns how many."""
        cutoff = b"t/%013d/" % max(0, now_ms - self.ttl_ms)
        batch = WriteBatch(raw_mode=True)
        n = 0
        for key, _ in self._scan(b"t/", 1_000_000):
            if key >= cutoff:
                break
            eid = key[16:]
            raw = self._db.get(b"e/" + eid)
            if raw is not None:
                ex = execution_pb2.Execution.FromString(raw)
                batch.delete(b"j/" + ex.job_id.encode() + b"/%013d" % (_MAX_MS - ex.scheduled_ms))
                batch.delete(b"e/" + eid)
            batch.delete(key)
            n += 1
        if n:
            self._db.write(batch)
        return n

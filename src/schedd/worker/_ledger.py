"""The worker's ledger (exactly-once layer 3) and checkpoint store, in one local RocksDB.

Key layout (raw bytes): ``L<execution id>`` → a serialized :class:`worker_pb2.Result` of the
attempt that finished; ``C<execution id>`` → 8-byte big-endian save time (ms) + checkpoint.
"""

from __future__ import annotations

import threading
from pathlib import Path

from rocksdict import WriteBatch

from schedd._rocksdb import open_rocksdb
from schedd.v1 import worker_pb2

_LEDGER = b"L"
_CHECKPOINT = b"C"
DEFAULT_TTL_S = 7 * 24 * 3600.0

#: Outcomes that end an attempt for good. A CANCELLED attempt is not recorded: the node may
#: hand the same attempt out again and it must then really run.
RECORDED_OUTCOMES = frozenset(
    {
        worker_pb2.OUTCOME_SUCCEEDED,
        worker_pb2.OUTCOME_FAILED,
        worker_pb2.OUTCOME_FAILED_PERMANENT,
        worker_pb2.OUTCOME_TIMED_OUT,
    }
)
_DROP_CHECKPOINT = frozenset({worker_pb2.OUTCOME_SUCCEEDED, worker_pb2.OUTCOME_FAILED_PERMANENT})


class Ledger:
    """Finished executions and checkpoints of one worker, durable across its restarts.

    :meth:`record` buffers; :meth:`flush` writes the buffer in one WriteBatch. The worker
    flushes before any Result leaves the process, so a result the node saw is always in the
    ledger. Lookups see buffered entries too. Thread-safe.
    """

    def __init__(self, path: str | Path) -> None:
        self._db = open_rocksdb(Path(path), "worker ledger")
        self._lock = threading.Lock()
        self._buffer: dict[str, worker_pb2.Result] = {}
        self._closed = False
        #: Executions with a stored checkpoint, so that a finished one deletes its checkpoint
        #: only if it has one (a tombstone per success doubled the cost of a flush).
        self._checkpointed = self._scan_checkpointed()

    def _scan_checkpointed(self) -> set[str]:
        found: set[str] = set()
        for k in self._db.keys(from_key=_CHECKPOINT):
            key = bytes(k)  # type: ignore[arg-type]
            if not key.startswith(_CHECKPOINT):
                break  # keys are sorted: the checkpoints are behind us
            found.add(key[len(_CHECKPOINT) :].decode())
        return found

    def record(self, result: worker_pb2.Result) -> None:
        """Remember a finished attempt (if its outcome is final; see RECORDED_OUTCOMES).

        Called on the event loop's thread only, like :meth:`flush` (one dict store, atomic
        under the GIL: no lock on the per-result path).
        """
        if result.outcome in RECORDED_OUTCOMES:
            self._buffer[result.execution_id] = result

    def flush(self) -> None:
        """Write buffered entries; a successful or permanently failed one drops its checkpoint."""
        with self._lock:
            if not self._buffer or self._closed:
                return
            batch = WriteBatch(raw_mode=True)
            for eid, result in self._buffer.items():
                key = eid.encode()
                batch.put(_LEDGER + key, result.SerializeToString())
                if eid in self._checkpointed and result.outcome in _DROP_CHECKPOINT:
                    batch.delete(_CHECKPOINT + key)
                    self._checkpointed.discard(eid)
            self._db.write(batch)
            self._buffer.clear()

    def get(self, execution_id: str) -> worker_pb2.Result | None:
        """The recorded result of the last finished attempt, or None."""
        with self._lock:
            buffered = self._buffer.get(execution_id)
            if buffered is not None:
                return buffered
            raw = self._db.get(_LEDGER + execution_id.encode())
        if raw is None:
            return None
        result = worker_pb2.Result()
        result.ParseFromString(raw)
        return result

    def save_checkpoint(self, execution_id: str, data: bytes, now_ms: int = 0) -> None:
        with self._lock:
            self._db.put(_CHECKPOINT + execution_id.encode(), now_ms.to_bytes(8, "big") + data)
            self._checkpointed.add(execution_id)

    def load_checkpoint(self, execution_id: str) -> bytes | None:
        with self._lock:
            raw = self._db.get(_CHECKPOINT + execution_id.encode())
        return None if raw is None else bytes(raw[8:])

    def prune(self, now_ms: int, ttl_s: float = DEFAULT_TTL_S) -> int:
        """Delete ledger entries finished (and checkpoints saved) before ``now - ttl``.

        Returns:
            How many keys were deleted.
        """
        cutoff = now_ms - int(ttl_s * 1000)
        doomed: list[bytes] = []
        with self._lock:
            for k, v in self._db.items():
                key, value = bytes(k), bytes(v)  # type: ignore[arg-type]
                if key.startswith(_LEDGER):
                    result = worker_pb2.Result()
                    result.ParseFromString(value)
                    if result.finished_ms < cutoff:
                        doomed.append(key)
                elif key.startswith(_CHECKPOINT) and int.from_bytes(value[:8], "big") < cutoff:
                    doomed.append(key)
            if doomed:
                batch = WriteBatch(raw_mode=True)
                for key in doomed:
                    batch.delete(key)
                    if key.startswith(_CHECKPOINT):
                        self._checkpointed.discard(key[len(_CHECKPOINT) :].decode())
                self._db.write(batch)
        return len(doomed)

    def close(self) -> None:
        """Flush and close the database (idempotent)."""
        self.flush()
        with self._lock:
            if not self._closed:
                self._closed = True
                self._db.close()

"""A fenced-write helper (exactly-once layer 4) for handlers' own local state."""

from __future__ import annotations

import threading
from pathlib import Path
from types import TracebackType

from rocksdict import Options, Rdict

from schedd._errors import StaleToken


class StaleWrite(StaleToken):
    """A fenced put was refused: a writer with a larger token already wrote the key."""

    def __init__(self, key: bytes, token: int, current: int) -> None:
        super().__init__(key.decode(errors="replace"), token, current)
        self.key = key
        self.args = (f"key {key!r}: token {token} is stale (written under token {current})",)


class FencedStore:
    """A key-value store in RocksDB whose writes carry fencing tokens.

    ``put(key, value, token)`` succeeds if no write with a *larger* token reached the key
    (equal tokens may rewrite: the same attempt retrying), and raises :class:`StaleWrite`
    (a :class:`~schedd.StaleToken`) otherwise. A zombie attempt that resumes after its
    execution was redelivered therefore cannot overwrite what the newer attempt wrote::

        store = FencedStore(data_dir / "effects")

        @worker.handler("bill")
        def bill(ctx, payload):
            store.put(f"invoice/{ctx.job_id}/{ctx.scheduled_ms}", b"sent", ctx.fencing_token)

    Keys and values are bytes (str keys are UTF-8 encoded). Thread-safe within a process; one
    process per path (RocksDB's lock).
    """

    def __init__(self, path: str | Path) -> None:
        Path(path).mkdir(parents=True, exist_ok=True)
        self._db = Rdict(str(path), Options(raw_mode=True))
        self._lock = threading.Lock()

    def put(self, key: bytes | str, value: bytes, token: int) -> None:
        """Write ``value`` under ``token``; raises StaleWrite if a larger token wrote first."""
        k = key.encode() if isinstance(key, str) else key
        with self._lock:
            current = self._token_locked(k)
            if current is not None and current > token:
                raise StaleWrite(k, token, current)
            self._db.put(k, token.to_bytes(8, "big", signed=True) + value)

    def get(self, key: bytes | str) -> bytes | None:
        """The value last written, or None."""
        k = key.encode() if isinstance(key, str) else key
        with self._lock:
            raw = self._db.get(k)
        return None if raw is None else bytes(raw[8:])

    def token(self, key: bytes | str) -> int | None:
        """The token of the last write to ``key``, or None."""
        k = key.encode() if isinstance(key, str) else key
        with self._lock:
            return self._token_locked(k)

    def _token_locked(self, k: bytes) -> int | None:
        raw = self._db.get(k)
        return None if raw is None else int.from_bytes(raw[:8], "big", signed=True)

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def __enter__(self) -> FencedStore:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

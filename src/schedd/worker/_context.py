"""What a handler sees: :class:`Context`, the payload codec and :class:`PermanentError`."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from schedd._errors import SchedError
from schedd.v1 import worker_pb2

if TYPE_CHECKING:
    from schedd.worker._ledger import Ledger


class PermanentError(SchedError):
    """Raise from a handler to fail the execution with no retry (OUTCOME_FAILED_PERMANENT)."""


def decode_payload(data: bytes) -> Any:
    """JSON-decode ``data`` when it parses as UTF-8 JSON, else return the bytes unchanged.

    An empty payload decodes to None.
    """
    if not data:
        return None
    try:
        return json.loads(data)
    except (UnicodeDecodeError, ValueError):
        return data


def encode_value(value: Any) -> bytes:
    """Bytes pass unchanged; anything else is JSON-encoded (TypeError if it cannot be)."""
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value)
    return json.dumps(value, separators=(",", ":")).encode()


class Context:
    """One attempt of one execution, as the handler sees it.

    Attributes may be read from any thread (sync handlers run in a pool); :meth:`heartbeat`
    must be awaited on the worker's event loop. ``fencing_token`` can grow while the handler
    runs (the node re-tokened the execution and this worker took it over): pass the current
    value to fenced writes.
    """

    def __init__(
        self, dispatch: worker_pb2.Dispatch, ledger: Ledger, beat: Callable[[], None]
    ) -> None:
        self._dispatch = dispatch
        self._ledger = ledger
        self._beat = beat
        self._cancelled = asyncio.Event()
        self.cancel_reason = ""
        self._pending_checkpoint: bytes | None = None
        self._saved_here = False

    @property
    def execution_id(self) -> str:
        """Also the idempotency key of the execution's effects."""
        return self._dispatch.execution_id

    @property
    def job_id(self) -> str:
        return self._dispatch.job_id

    @property
    def tenant(self) -> str:
        return self._dispatch.tenant

    @property
    def scheduled_ms(self) -> int:
        """The fire time this execution is for, in UTC milliseconds."""
        return self._dispatch.scheduled_ms

    @property
    def scheduled_time(self) -> datetime:
        """The fire time as an aware UTC datetime."""
        return datetime.fromtimestamp(self._dispatch.scheduled_ms / 1000.0, tz=UTC)

    @property
    def attempt(self) -> int:
        """1 for the first attempt."""
        return self._dispatch.attempt

    @property
    def max_attempts(self) -> int:
        return self._dispatch.max_attempts

    @property
    def fencing_token(self) -> int:
        """The token in force; strictly larger for every redelivery or retry."""
        return self._dispatch.fencing_token

    @property
    def deadline_ms(self) -> int:
        """When the attempt is cancelled as TIMED_OUT (UTC ms; 0: no deadline)."""
        return self._dispatch.deadline_ms

    @property
    def cancelled(self) -> bool:
        """True once the node (or a shutdown) asked this attempt to stop."""
        return self._cancelled.is_set()

    async def wait_cancelled(self) -> None:
        """Return when the attempt is cancelled."""
        await self._cancelled.wait()

    async def heartbeat(self) -> None:
        """Renew the lease now (heartbeats are also sent automatically every interval)."""
        self._beat()

    def save_checkpoint(self, data: Any) -> None:
        """Store progress durably in the local RocksDB; it travels with the next heartbeat.

        ``data`` is bytes (kept as is) or anything JSON-encodable. A redelivered attempt reads
        it back with :meth:`load_checkpoint`.
        """
        encoded = encode_value(data)
        self._ledger.save_checkpoint(self.execution_id, encoded)
        self._pending_checkpoint = encoded
        self._saved_here = True

    def load_checkpoint(self) -> Any | None:
        """The newest checkpoint: saved in this attempt, else the one the node sent with the
        Dispatch, else one in the local store. Decoded like payloads; None when there is none.
        """
        raw: bytes | None = None
        if not self._saved_here and self._dispatch.has_checkpoint:
            raw = self._dispatch.checkpoint
        else:
            raw = self._ledger.load_checkpoint(self.execution_id)
        return None if raw is None else decode_payload(raw)

    # ---- used by the worker -----------------------------------------------------------------

    def take_checkpoint(self) -> bytes | None:
        data, self._pending_checkpoint = self._pending_checkpoint, None
        return data

    def cancel(self, reason: str) -> None:
        if not self._cancelled.is_set():
            self.cancel_reason = reason
            self._cancelled.set()

"""What a handler sees: :class:`Context`, the payload codec and :class:`PermanentError`."""

from __future__ import annotations

import asyncio
import codecs
import json
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from schedd._errors import SchedError
from schedd.model import MAX_CHECKPOINT_BYTES
from schedd.v1 import worker_pb2

if TYPE_CHECKING:
    from schedd.worker._ledger import Ledger


class PermanentError(SchedError):
    """Raise from a handler to fail the execution with no retry (OUTCOME_FAILED_PERMANENT)."""


class CheckpointTooLarge(PermanentError):
    """A checkpoint above :data:`MAX_CHECKPOINT_BYTES`: keep large state elsewhere and
    checkpoint a reference to it."""


_DECODER = json.JSONDecoder()
_BOMS = (codecs.BOM_UTF8, codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)  # UTF-32 LE starts as 16 LE


def decode_payload(data: bytes) -> Any:
    """JSON-decode ``data`` when it parses as UTF-8 JSON, else return the bytes unchanged.

    An empty payload decodes to None.
    """
    if not data:
        return None
    try:
        if data.startswith(_BOMS) or 0 in data[:4]:  # UTF-8 with a BOM, UTF-16 or UTF-32
            return json.loads(data)
        # What json.loads does for bytes it detects as UTF-8, without the detection.
        return _DECODER.decode(data.decode("utf-8", "surrogatepass"))
    except (UnicodeDecodeError, ValueError):
        return data


#: One compact encoder for every value: json.dumps with options builds a new one per call.
_ENCODER = json.JSONEncoder(separators=(",", ":"))


def encode_value(value: Any) -> bytes:
    """Bytes pass unchanged; anything else is JSON-encoded (TypeError if it cannot be)."""
    if value is None:
        return b"null"
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value)
    return _ENCODER.encode(value).encode()


class Context:
    """One attempt of one execution, as the handler sees it.

    Attributes may be read from any thread (sync handlers run in a pool); :meth:`heartbeat`
    must be awaited on the worker's event loop. ``fencing_token`` can grow while the handler
    runs (the node re-tokened the execution and this worker took it over): pass the current
    value to fenced writes.
    """

    def __init__(
        self,
        dispatch: worker_pb2.Dispatch,
        ledger: Ledger,
        beat: Callable[[], None] | None = None,
    ) -> None:
        self._dispatch = dispatch
        self._ledger = ledger
        self._beat = beat
        self._cancelled = False
        #: Made by the first wait_cancelled(): most attempts never wait, so never pay for one.
        self._cancel_event: asyncio.Event | None = None
        #: Called (on the loop) when the attempt is cancelled; the worker's running execution.
        self._on_cancel: Callable[[], None] | None = None
        self.cancel_reason = ""
        #: When the worker started this attempt (UTC ms, the worker's clock; 0 before).
        self.started_ms = 0
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
    def raw_payload(self) -> bytes:
        """The payload as the node sent it (an execution's override, else the job's)."""
        return self._dispatch.payload

    @property
    def target(self) -> bytes:
        """An http or shell job's target: a serialized ``schedd.v1.Job`` with only its
        ``http`` or ``shell`` set (empty for handler jobs)."""
        return self._dispatch.target

    @property
    def deadline_ms(self) -> int:
        """When the attempt is cancelled as TIMED_OUT (UTC ms; 0: no deadline)."""
        return self._dispatch.deadline_ms

    @property
    def cancelled(self) -> bool:
        """True once the node (or a shutdown) asked this attempt to stop."""
        return self._cancelled

    async def wait_cancelled(self) -> None:
        """Return when the attempt is cancelled."""
        if self._cancelled:
            return
        if self._cancel_event is None:
            self._cancel_event = asyncio.Event()
        await self._cancel_event.wait()

    async def heartbeat(self) -> None:
        """Renew the lease now (heartbeats are also sent automatically every interval)."""
        if self._beat is not None:
            self._beat()

    def save_checkpoint(self, data: Any) -> None:
        """Store progress durably in the local RocksDB; it travels with the next heartbeat.

        ``data`` is bytes (kept as is) or anything JSON-encodable. A redelivered attempt reads
        it back with :meth:`load_checkpoint`. The owner node writes it to etcd when the
        heartbeat reaches it, so it survives the loss of this worker and of the owner.

        Raises:
            CheckpointTooLarge: encoded, it is above 64 KiB (the attempt fails permanently
                unless the handler catches it).
        """
        encoded = encode_value(data)
        if len(encoded) > MAX_CHECKPOINT_BYTES:
            raise CheckpointTooLarge(
                f"checkpoint is {len(encoded)} bytes; at most {MAX_CHECKPOINT_BYTES} allowed"
            )
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
        """Mark the attempt cancelled (first reason wins), wake waiters, tell the worker."""
        if self._cancelled:
            return
        self.cancel_reason = reason
        self._cancelled = True
        if self._cancel_event is not None:
            self._cancel_event.set()
        if self._on_cancel is not None:
            self._on_cancel()

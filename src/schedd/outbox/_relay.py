"""The relay: sends the outbox's unsent rows to schedd, in order, and marks them.

One round: claim a batch (lowest ids first, for a lease), send each row (the row's key as
its idempotency key), mark it sent (or failed, when schedd refuses it for good), free what is
left of the claim. Between rounds the relay waits for a notification (PostgreSQL: LISTEN on
the table's channel, which :func:`~schedd.outbox.enqueue` notifies in its transaction) or for
``poll_s`` (SQLite, or a notification lost). schedd unavailable, or the database: the relay
backs off (exponential, full jitter) and catches up when it answers again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
import signal
import time
from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import Engine, create_engine
from sqlalchemy.exc import SQLAlchemyError

from schedd._errors import InvalidArgument, SchedError
from schedd.client import AsyncClient
from schedd.obs import MetricsRecorder, NoopRecorder
from schedd.outbox._listen import listen
from schedd.outbox._rows import OutboxRows, Row
from schedd.outbox._send import Refused, send_row
from schedd.outbox._table import DEFAULT_TABLE, create_table, outbox_table

log = logging.getLogger("schedd.outbox")

#: Test hook, never set in production: after sending a row and before marking it, the relay
#: appends the row's id to this file and stops itself (SIGSTOP), so a test can SIGKILL it
#: exactly there.
STOP_AFTER_SEND_ENV = "SCHEDD_OUTBOX_STOP_AFTER_SEND"


@dataclass(frozen=True)
class RelayConfig:
    """How a relay works (defaults suit production; tests shorten the times)."""

    #: The outbox table's name.
    table: str = DEFAULT_TABLE
    #: Rows claimed at once.
    batch: int = 100
    #: Wait between rounds when the outbox is empty (PostgreSQL: only when no notification
    #: comes).
    poll_s: float = 1.0
    #: How long a claim holds its rows: a relay that dies holding them delays them this long.
    lease_s: float = 30.0
    #: Backoff after a failure: the first delay, and the longest (each a random fraction).
    backoff_initial_s: float = 0.2
    backoff_max_s: float = 30.0
    #: Deadline of each call to schedd.
    call_timeout_s: float = 10.0
    #: Create the table when it does not exist.
    create_table: bool = False

    def check(self) -> None:
        """Raises InvalidArgument naming the first setting out of range."""
        for name in ("poll_s", "lease_s", "backoff_initial_s", "backoff_max_s", "call_timeout_s"):
            if getattr(self, name) <= 0:
                raise InvalidArgument(name, "must be positive")
        if self.batch < 1 or self.batch > 10_000:
            raise InvalidArgument("batch", "must be between 1 and 10000")
        if self.lease_s <= self.call_timeout_s:
            raise InvalidArgument("lease_s", "must be longer than call_timeout_s")


class Relay:
    """Sends an outbox table's rows to schedd (``await relay.run()``; ``await relay.stop()``).

    Args:
        db: A SQLAlchemy URL (``sqlite:///app.db``, ``postgresql+psycopg://...``) or an Engine.
        node: schedd's endpoints, ``HOST:PORT`` items (a sequence or comma-separated).
        config: Batch size, waits, lease; :class:`RelayConfig`.
        recorder: Where the relay's gauges go (``schedd_outbox_*``; see docs/outbox.md).
        token, tls: As for :class:`~schedd.client.AsyncClient`.
    """

    def __init__(
        self,
        db: str | Engine,
        node: str | Sequence[str],
        config: RelayConfig | None = None,
        *,
        recorder: MetricsRecorder | None = None,
        token: str | None = None,
        tls: str | bool | None = None,
    ) -> None:
        self.config = config or RelayConfig()
        self.config.check()
        self._own_engine = isinstance(db, str)
        self.engine = create_engine(db) if isinstance(db, str) else db
        self.rows = OutboxRows(self.engine, outbox_table(None, self.config.table))
        self._node, self._token, self._tls = node, token, tls
        self._stopping = asyncio.Event()
        self._wake = asyncio.Event()
        self._done = asyncio.Event()
        self._running = False
        #: Rows sent, and rows marked failed, since the relay started.
        self.sent = 0
        self.failed = 0
        self.unsent = 0
        self._oldest_ms: int | None = None
        self._backlog_read = 0.0
        self._hook = os.environ.get(STOP_AFTER_SEND_ENV, "")
        self._register(recorder or NoopRecorder())

    def _register(self, r: MetricsRecorder) -> None:
        r.gauge("schedd_outbox_rows_sent", "Outbox rows sent to schedd since start", self._n_sent)
        r.gauge("schedd_outbox_rows_failed", "Outbox rows schedd refused for good", self._n_failed)
        r.gauge("schedd_outbox_unsent_rows", "Outbox rows not sent yet", self._n_unsent)
        r.gauge(
            "schedd_outbox_oldest_unsent_age_seconds",
            "Age of the oldest unsent outbox row (0: none)",
            self.oldest_age_s,
        )

    def _n_sent(self) -> float:
        return float(self.sent)

    def _n_failed(self) -> float:
        return float(self.failed)

    def _n_unsent(self) -> float:
        return float(self.unsent)

    def oldest_age_s(self) -> float:
        """Seconds since the oldest unsent row was enqueued, as last read (0: none)."""
        if self._oldest_ms is None:
            return 0.0
        return max(0.0, time.time() - self._oldest_ms / 1000)

    async def run(self) -> None:
        """Relays until :meth:`stop`."""
        cfg = self.config
        if self._running:
            raise RuntimeError("this relay is running already")
        self._running = True
        self._done.clear()
        if cfg.create_table:
            await asyncio.to_thread(create_table, self.engine, cfg.table)
        client = AsyncClient(self._node, timeout_s=cfg.call_timeout_s, token=self._token,
                             tls=self._tls)  # fmt: skip
        listener = None
        if self.engine.dialect.name == "postgresql":
            listener = asyncio.create_task(listen(self.engine.url, cfg.table, self._wake))
        log.info("outbox relay: %s -> schedd at %s", self._where(), ",".join(client.endpoints))
        try:
            await self._loop(client)
        finally:
            if listener is not None:
                listener.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await listener
            await client.close()
            if self._own_engine:
                self.engine.dispose()
            self._running = False
            self._done.set()

    def _where(self) -> str:
        return f"table {self.config.table} on {self.engine.url.render_as_string()}"

    async def stop(self) -> None:
        """Stops after the row being sent (if any) is marked; returns when :meth:`run` did
        (at once when it is not running)."""
        self._stopping.set()
        self._wake.set()
        if self._running:
            await self._done.wait()

    async def _loop(self, client: AsyncClient) -> None:
        failures = 0
        down_since = 0.0
        while not self._stopping.is_set():
            try:
                full = await self._round(client)
            except (SchedError, SQLAlchemyError) as exc:
                failures += 1
                down_since = down_since or time.monotonic()
                delay = self._backoff(failures)
                what = "schedd" if isinstance(exc, SchedError) else "the database"
                log.warning("outbox relay: %s failed (%s); retrying in %.1f s (failure %d)",
                            what, _one_line(exc), delay, failures)  # fmt: skip
                await self._read_backlog()  # the lag grows while schedd is down: show it
                await self._sleep(delay)
                continue
            await self._read_backlog()
            if failures:
                log.info("outbox relay: working again after %.1f s and %d failures",
                         time.monotonic() - down_since, failures)  # fmt: skip
                failures, down_since = 0, 0.0
            if not full:
                await self._sleep(self.config.poll_s)

    def _backoff(self, failures: int) -> float:
        cfg = self.config
        cap = min(cfg.backoff_max_s, cfg.backoff_initial_s * 2 ** min(failures - 1, 30))
        return random.uniform(cfg.backoff_initial_s / 2, cap)

    async def _sleep(self, seconds: float) -> None:
        """Waits ``seconds``, less when woken (a notification, or stop)."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._wake.wait(), seconds)
        self._wake.clear()

    async def _read_backlog(self) -> None:
        """Reads the unsent rows' count and age for the gauges, at most once a second (the
        database down: the last values stay)."""
        now = time.monotonic()
        if now - self._backlog_read < 1.0:
            return
        self._backlog_read = now
        with contextlib.suppress(SQLAlchemyError):
            self.unsent, self._oldest_ms = await asyncio.to_thread(self.rows.backlog)

    async def _round(self, client: AsyncClient) -> bool:
        """One claim, sent and marked; True when it was a full batch (more may wait)."""
        cfg = self.config
        token, rows = await asyncio.to_thread(
            self.rows.claim, cfg.batch, int(cfg.lease_s * 1000), _now_ms()
        )
        if not rows:
            return False
        before = self.sent + self.failed
        try:
            for row in rows:
                # Send only while the claim surely holds the row, a call's deadline to spare.
                if self._stopping.is_set() or _now_ms() > row.claimed_until_ms - _margin_ms(cfg):
                    break
                await self._one(client, row, token)
        finally:
            with contextlib.suppress(SQLAlchemyError):
                await asyncio.to_thread(self.rows.release, token)
            if done := self.sent + self.failed - before:
                log.info("outbox relay: %d of %d claimed rows handled (ids %d-%d)",
                         done, len(rows), rows[0].id, rows[-1].id)  # fmt: skip
        return len(rows) == cfg.batch

    async def _one(self, client: AsyncClient, row: Row, token: str) -> None:
        try:
            sent = await send_row(client, row)
        except Refused as why:
            if await asyncio.to_thread(self.rows.mark_failed, row, token, str(why), _now_ms()):
                self.failed += 1
                log.error("outbox relay: row %d (%s %s) refused for good, marked failed: %s",
                          row.id, row.action, row.job_ref or row.key, why)  # fmt: skip
            return
        if self._hook:
            _stop_here(self._hook, row.id)
        if await asyncio.to_thread(self.rows.mark_sent, row, token, sent.result, _now_ms()):
            self.sent += 1
            log.debug("outbox relay: row %d sent: %s", row.id, sent.what)
        else:
            log.warning("outbox relay: row %d was sent but its claim had run out; another relay"
                        " holds it now", row.id)  # fmt: skip


def _margin_ms(cfg: RelayConfig) -> int:
    return int(cfg.call_timeout_s * 1000) + 1000


def _now_ms() -> int:
    return int(time.time() * 1000)


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:300]


def _stop_here(path: str, row_id: int) -> None:
    with open(path, "a", encoding="utf-8") as f:
        f.write(f"{row_id}\n")
    os.kill(os.getpid(), signal.SIGSTOP)

"""PostgreSQL: wake the relay when a transaction that enqueued rows commits (LISTEN/NOTIFY).

The listener holds its own connection (psycopg, autocommit) and sets the relay's wake event
on each notification on the table's channel, and once after every (re)connect, for what was
committed while it was not listening. When the database is unreachable it reconnects with
backoff; the relay polls meanwhile, so nothing waits on the listener.
"""

from __future__ import annotations

import asyncio
import logging
import random

import psycopg
from psycopg import sql
from sqlalchemy import URL

log = logging.getLogger("schedd.outbox")


def conninfo(url: URL) -> str:
    """The libpq connection string of a SQLAlchemy PostgreSQL URL (any driver name)."""
    return url.set(drivername="postgresql").render_as_string(hide_password=False)


async def listen(url: URL, channel: str, wake: asyncio.Event) -> None:
    """Sets ``wake`` on each notification on ``channel`` until cancelled."""
    failures = 0
    while True:
        try:
            async with await psycopg.AsyncConnection.connect(
                conninfo(url), autocommit=True
            ) as conn:
                await conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel)))
                if failures:
                    log.info("outbox relay: listening for notifications again")
                failures = 0
                wake.set()
                async for _ in conn.notifies():
                    wake.set()
        except psycopg.Error as exc:
            failures += 1
            delay = random.uniform(0.5, min(30.0, 0.5 * 2 ** min(failures, 8)))
            log.warning("outbox relay: LISTEN %s failed (%s); polling, again in %.1f s",
                        channel, str(exc).strip().splitlines()[0] if str(exc).strip() else
                        type(exc).__name__, delay)  # fmt: skip
            await asyncio.sleep(delay)

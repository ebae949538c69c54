"""The relay's side of the outbox table: claim a batch for a lease, mark rows, read the backlog.

Every method is one short transaction on the engine (blocking: the relay runs them in a
thread). A claim is one ``UPDATE ... WHERE id IN (SELECT ... ORDER BY id LIMIT n)``; on
PostgreSQL the inner select is ``FOR UPDATE SKIP LOCKED``, so relays claiming at the same
moment take different rows instead of waiting for each other. On SQLite the database's single
writer lock serializes claims. A claim stamps the rows with a random ``claimed_by`` and a lease
(``claimed_until_ms``); marks are made only by the claim that holds the row, so a relay that
lost its rows (it was stopped past its lease) cannot mark them over another's.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from sqlalchemy import Engine, Table, func, or_, select, update

from schedd.outbox._table import FAILED, SENT, UNSENT

#: The longest error text kept in a failed row.
MAX_ERROR_CHARS = 2000


@dataclass(frozen=True)
class Row:
    """One claimed outbox row, as the relay sends it."""

    id: int
    key: str
    action: str
    tenant: str
    job_ref: str
    body: bytes
    attempts: int
    first_attempt_ms: int
    claimed_until_ms: int


class OutboxRows:
    """The outbox table as the relay reads and writes it."""

    def __init__(self, engine: Engine, table: Table) -> None:
        self.engine = engine
        self.table = table
        self._skip_locked = engine.dialect.name == "postgresql"

    def claim(self, n: int, lease_ms: int, now_ms: int) -> tuple[str, list[Row]]:
        """Claims up to ``n`` unsent rows whose lease (if any) ran out, lowest ids first, for
        ``lease_ms``; returns the claim's token and the rows in id order."""
        t = self.table
        token = uuid.uuid4().hex
        free = or_(t.c.claimed_until_ms.is_(None), t.c.claimed_until_ms < now_ms)
        pick = select(t.c.id).where(t.c.state == UNSENT, free).order_by(t.c.id).limit(n)
        if self._skip_locked:
            pick = pick.with_for_update(skip_locked=True)
        stamp = (
            update(t)
            .where(t.c.id.in_(pick.scalar_subquery()))
            .values(
                claimed_by=token,
                claimed_until_ms=now_ms + lease_ms,
                attempts=t.c.attempts + 1,
                first_attempt_ms=func.coalesce(t.c.first_attempt_ms, now_ms),
            )
        )
        cols = (t.c.id, t.c.key, t.c.action, t.c.tenant, t.c.job_ref, t.c.body, t.c.attempts,
                t.c.first_attempt_ms, t.c.claimed_until_ms)  # fmt: skip
        with self.engine.begin() as conn:
            conn.execute(stamp)
            got = conn.execute(
                select(*cols).where(t.c.claimed_by == token, t.c.state == UNSENT).order_by(t.c.id)
            ).all()
        return token, [Row(*r) for r in got]

    def _mark(self, row: Row, token: str, **values: object) -> bool:
        t = self.table
        stmt = (
            update(t)
            .where(t.c.id == row.id, t.c.claimed_by == token, t.c.state == UNSENT)
            .values(claimed_until_ms=None, **values)
        )
        with self.engine.begin() as conn:
            return conn.execute(stmt).rowcount == 1

    def mark_sent(self, row: Row, token: str, result: str, now_ms: int) -> bool:
        """Marks a row sent with what schedd made of it (a job id or an execution id); False
        when this claim no longer holds the row (its lease ran out and another took it)."""
        return self._mark(row, token, state=SENT, result=result, sent_ms=now_ms)

    def mark_failed(self, row: Row, token: str, error: str, now_ms: int) -> bool:
        """Marks a row failed for good with ``error``; False as for :meth:`mark_sent`."""
        return self._mark(row, token, state=FAILED, error=error[:MAX_ERROR_CHARS], sent_ms=now_ms)

    def release(self, token: str) -> None:
        """Frees the rows of a claim that are still unsent, for the next claim at once."""
        t = self.table
        stmt = (
            update(t)
            .where(t.c.claimed_by == token, t.c.state == UNSENT)
            .values(claimed_until_ms=None)
        )
        with self.engine.begin() as conn:
            conn.execute(stmt)

    def backlog(self) -> tuple[int, int | None]:
        """How many rows are unsent, and when the oldest of them was enqueued (ms; None when
        there is none)."""
        t = self.table
        stmt = select(func.count(), func.min(t.c.created_ms)).where(t.c.state == UNSENT)
        with self.engine.connect() as conn:
            count, oldest = conn.execute(stmt).one()
        return int(count), (int(oldest) if oldest is not None else None)

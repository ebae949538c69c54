"""The transactional outbox: decide inside your own database transaction, schedd acts on it.

A service that decides in a transaction to create a job or to run one ("order placed: send
the reminder in 3 days") writes the decision as a row of its own database, in that same
transaction, with :func:`create_job` or :func:`trigger_job` (or :func:`enqueue`). The row
commits with the business data or not at all. A :class:`Relay` (``schedd outbox relay``)
sends the rows to schedd in order, each with its own idempotency key, and marks them sent; a
row schedd refuses for good is marked failed with the reason and the rest go on::

    from sqlalchemy import create_engine
    from schedd import outbox

    engine = create_engine("postgresql+psycopg://app@db/app")
    outbox.create_table(engine)
    with engine.begin() as conn:
        conn.execute(orders.insert().values(id=order_id, ...))
        outbox.create_job(conn, name=f"remind-{order_id}", schedule="@after 3d",
                          handler="send_reminder", payload={"order": order_id})

SQLite and PostgreSQL alike (SQLAlchemy Core). docs/outbox.md has the table's DDL, the relay's
settings, its metrics and what happens when the relay, schedd or the database fails.

Needs the ``outbox`` extra (``pip install 'schedd[outbox]'``: SQLAlchemy, psycopg).
"""

from schedd.outbox._enqueue import create_job, enqueue, trigger_job
from schedd.outbox._relay import STOP_AFTER_SEND_ENV, Relay, RelayConfig
from schedd.outbox._table import (
    ACTION_CREATE,
    ACTION_TRIGGER,
    DEFAULT_TABLE,
    FAILED,
    SENT,
    UNSENT,
    create_table,
    outbox_table,
)

__all__ = [
    "ACTION_CREATE",
    "ACTION_TRIGGER",
    "DEFAULT_TABLE",
    "FAILED",
    "SENT",
    "STOP_AFTER_SEND_ENV",
    "UNSENT",
    "Relay",
    "RelayConfig",
    "create_job",
    "create_table",
    "enqueue",
    "outbox_table",
    "trigger_job",
]

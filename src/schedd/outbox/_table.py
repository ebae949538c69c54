"""The outbox table: one row per decision a service made inside its own transaction.

The same :class:`~sqlalchemy.Table` serves SQLite and PostgreSQL (docs/outbox.md shows the DDL
each gets). Columns:

``id``
    Ascending row number: the relay sends rows in this order.
``key``
    The idempotency key schedd sees (``outbox-`` and a random UUID, made at enqueue): unique
    across every table and service that talks to one schedd tenant, and the same on every
    resend of the row.
``action``
    ``create`` (``body`` is a serialized ``schedd.v1.Job``) or ``trigger`` (``job_ref`` is the
    job's id or name, ``body`` the payload override, empty for none).
``state``
    ``unsent``, then ``sent`` (``result``: the job id or execution id) or ``failed``
    (``error``: what schedd said when it refused the row for good).
``attempts``, ``first_attempt_ms``, ``claimed_by``, ``claimed_until_ms``
    The relay's bookkeeping: a relay claims a batch of rows for a lease, sends them and marks
    them; a row it could not mark (the relay died) is claimed again once the lease ran out.
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Column,
    Engine,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Table,
    Text,
    text,
)

#: The table's name unless another is given.
DEFAULT_TABLE = "schedd_outbox"
ACTION_CREATE = "create"
ACTION_TRIGGER = "trigger"
UNSENT = "unsent"
SENT = "sent"
FAILED = "failed"

#: SQLite has no BIGINT autoincrement: there the row id is an INTEGER PRIMARY KEY (its rowid).
_RowId = BigInteger().with_variant(Integer(), "sqlite")

_tables: dict[str, Table] = {}


def outbox_table(metadata: MetaData | None = None, name: str = DEFAULT_TABLE) -> Table:
    """The outbox :class:`~sqlalchemy.Table` named ``name`` on ``metadata`` (so it is created
    with the application's own tables and migrations), or on a private MetaData when none is
    given (the same Table for the same name on every call then)."""
    if metadata is None:
        if name not in _tables:
            _tables[name] = outbox_table(MetaData(), name)
        return _tables[name]
    if name in metadata.tables:
        return metadata.tables[name]
    return Table(
        name,
        metadata,
        Column("id", _RowId, primary_key=True, autoincrement=True),
        Column("key", String(64), nullable=False, unique=True),
        Column("action", String(16), nullable=False),
        Column("tenant", String(128), nullable=False, server_default=""),
        Column("job_ref", String(512), nullable=False, server_default=""),
        Column("body", LargeBinary, nullable=False),
        Column("created_ms", BigInteger, nullable=False),
        Column("state", String(16), nullable=False, server_default=UNSENT),
        Column("attempts", Integer, nullable=False, server_default=text("0")),
        Column("first_attempt_ms", BigInteger, nullable=True),
        Column("claimed_by", String(64), nullable=True),
        Column("claimed_until_ms", BigInteger, nullable=True),
        Column("sent_ms", BigInteger, nullable=True),
        Column("result", String(600), nullable=True),
        Column("error", Text, nullable=True),
        Index(f"{name}_state_id", "state", "id"),
        Index(f"{name}_claimed_by", "claimed_by"),
        Index(f"{name}_result", "result"),
    )


def create_table(engine: Engine, name: str = DEFAULT_TABLE) -> Table:
    """Creates the outbox table ``name`` (and its indexes) if it does not exist; returns it."""
    table = outbox_table(None, name)
    table.create(engine, checkfirst=True)
    return table

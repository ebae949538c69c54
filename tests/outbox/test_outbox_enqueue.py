"""Enqueueing without schedd: a row commits with the caller's transaction or not at all, bad
input names its field, the relay command says what is wrong in one line, and ``import schedd``
(and the ``schedd`` command) work without SQLAlchemy loaded."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy import MetaData, create_engine, inspect, select

from schedd import InvalidArgument, outbox
from schedd.client import build_job
from schedd.v1 import job_pb2


def test_a_row_commits_with_the_transaction_or_not_at_all(tmp_path: Path) -> None:
    engine = create_engine(f"sqlite:///{tmp_path / 'app.db'}")
    meta = MetaData()
    table = outbox.outbox_table(meta, "my_outbox")  # on the application's own MetaData
    meta.create_all(engine)
    assert "my_outbox" in inspect(engine).get_table_names()
    with pytest.raises(RuntimeError), engine.begin() as conn:
        outbox.create_job(conn, name="never", schedule="@after 1h", handler="h", table=table)
        raise RuntimeError("rolled back")
    job = build_job("kept", schedule="@after 3d", handler="h", idempotency_key="mine")
    with engine.begin() as conn:
        first = outbox.create_job(conn, job, table=table)
        second = outbox.trigger_job(conn, "kept", payload=b"raw", table=table)
    assert second > first
    with engine.connect() as conn:
        rows = conn.execute(select(table).order_by(table.c.id)).all()
    assert [(r.action, r.state, r.job_ref) for r in rows] == [
        ("create", "unsent", ""),
        ("trigger", "unsent", "kept"),
    ]
    assert job_pb2.Job.FromString(rows[0].body).idempotency_key == "mine"
    assert rows[1].body == b"raw"
    assert rows[0].key != rows[1].key and rows[0].key.startswith("outbox-")
    engine.dispose()


def test_bad_input_names_the_field(tmp_path: Path) -> None:
    engine = create_engine(f"sqlite:///{tmp_path / 'app.db'}")
    outbox.create_table(engine)
    cases = [
        (lambda c: outbox.enqueue(c, "delete"), "action"),
        (lambda c: outbox.enqueue(c, "create"), "job"),
        (lambda c: outbox.trigger_job(c, " "), "job_ref"),
        (lambda c: outbox.create_job(c, name="x", handler="h"), "schedule"),
        (lambda c: outbox.create_job(c, name="x", schedule="@after 1h", misfire="no"), "misfire"),
        (lambda c: outbox.trigger_job(c, "x", payload={1, 2}), "payload"),
    ]
    for call, field in cases:
        with pytest.raises(InvalidArgument) as err, engine.begin() as conn:
            call(conn)
        assert err.value.field == field, (field, err.value)
    with pytest.raises(InvalidArgument) as err:
        outbox.RelayConfig(lease_s=5, call_timeout_s=10).check()
    assert err.value.field == "lease_s"
    engine.dispose()


def test_import_schedd_does_not_load_sqlalchemy() -> None:
    code = (
        "import sys, schedd, schedd.client, schedd.cli.schedd_main, schedd.cli.schedctl\n"
        "assert 'sqlalchemy' not in sys.modules and 'psycopg' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_the_relay_command_says_what_is_wrong_in_one_line() -> None:
    cmd = [sys.executable, "-m", "schedd.cli.schedd_main", "outbox", "relay"]
    out = subprocess.run(
        [*cmd, "--db", "nosuchdb://x", "--node", "127.0.0.1:1"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert out.returncode == 2, out.stderr
    assert "Traceback" not in out.stderr
    [line] = out.stderr.strip().splitlines()
    assert line.startswith("schedd outbox relay: db: ")

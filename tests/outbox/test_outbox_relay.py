"""The relay in-process against a real node, on SQLite and on a real PostgreSQL: committed rows
become exactly one job or run each, rolled-back ones nothing; a row schedd refuses for good is
marked failed and the rows after it go on; rows sent again (their marks lost) change nothing;
several relays share one PostgreSQL outbox; NOTIFY wakes a relay long before its poll."""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from typing import Any

import pytest
from prometheus_client import generate_latest
from sqlalchemy import Engine, create_engine, func, select, update

from schedd import outbox
from schedd.client import AsyncClient
from schedd.obs import PrometheusRecorder
from schedd.v1 import execution_pb2

pytestmark = pytest.mark.timeout(60)

FAST = outbox.RelayConfig(poll_s=0.1, lease_s=5, call_timeout_s=2, backoff_initial_s=0.05,
                          backoff_max_s=0.5)  # fmt: skip


def _unsent(engine: Engine) -> int:
    t = outbox.outbox_table()
    with engine.connect() as conn:
        return int(
            conn.execute(select(func.count()).where(t.c.state == outbox.UNSENT)).scalar_one()
        )


def _rows(engine: Engine) -> list[Any]:
    t = outbox.outbox_table()
    with engine.connect() as conn:
        return list(conn.execute(select(t).order_by(t.c.id)).all())


async def _drain(*relays: outbox.Relay, engine: Engine, timeout_s: float = 20) -> None:
    """Runs the relays until the outbox has no unsent row, then stops them."""
    tasks = [asyncio.ensure_future(r.run()) for r in relays]
    try:
        deadline = time.monotonic() + timeout_s
        while _unsent(engine):
            assert time.monotonic() < deadline, "rows left unsent"
            for t in tasks:
                if t.done():
                    t.result()
            await asyncio.sleep(0.05)
    finally:
        for r in relays:
            await r.stop()
        for t in tasks:
            await t


async def _manual_runs(client: AsyncClient, job_id: str) -> list[execution_pb2.Execution]:
    runs = await client.list_executions(job_id, limit=1000)
    return [ex for ex in runs if ex.trigger == execution_pb2.TRIGGER_MANUAL]


async def test_committed_rows_become_one_job_or_run_each(db_url: str, node: Any) -> None:
    p = uuid.uuid4().hex[:8]
    engine = create_engine(db_url)
    outbox.create_table(engine)
    async with AsyncClient(node.endpoint) as client:
        target = (await client.create_job(f"{p}-target", schedule="0 0 1 1 *", handler="h")).job
        with engine.begin() as conn:
            outbox.create_job(conn, name=f"{p}-remind", schedule="@after 3d", handler="remind",
                              payload={"order": 1})  # fmt: skip
            outbox.trigger_job(conn, target.id, payload={"n": 1})
            outbox.create_job(conn, name=f"{p}-bad", schedule="61 * * * *", handler="h")
            outbox.trigger_job(conn, f"{p}-target")  # by name, the job's own payload
            outbox.trigger_job(conn, f"{p}-nosuch")
            outbox.create_job(conn, name=f"{p}-daily", schedule="0 9 * * *", handler="h")
        with pytest.raises(RuntimeError), engine.begin() as conn:
            outbox.create_job(conn, name=f"{p}-rolledback", schedule="@after 1h", handler="h")
            outbox.trigger_job(conn, target.id)
            raise RuntimeError("the order could not be placed")
        recorder = PrometheusRecorder(("outbox",), process=False)
        relay = outbox.Relay(engine, node.endpoint, FAST, recorder=recorder)
        await _drain(relay, engine=engine)

        rows = _rows(engine)
        assert [r.state for r in rows] == ["sent", "sent", "failed", "sent", "failed", "sent"]
        assert "INVALID_ARGUMENT" in rows[2].error and "schedule" in rows[2].error
        assert "NOT_FOUND" in rows[4].error and f"{p}-nosuch" in rows[4].error
        names = sorted([j.name async for j in client.list_jobs(name_prefix=p)])
        assert names == [f"{p}-daily", f"{p}-remind", f"{p}-target"]
        runs = await _manual_runs(client, target.id)
        assert sorted(r.id for r in runs) == sorted([rows[1].result, rows[3].result])
        assert {r.payload_override for r in runs} == {b'{"n":1}', b""}
        assert (relay.sent, relay.failed) == (4, 2)
        text = generate_latest(recorder.registry).decode()
        assert "schedd_outbox_rows_sent 4.0" in text
        assert "schedd_outbox_rows_failed 2.0" in text
        assert "schedd_outbox_unsent_rows 0.0" in text
        assert "schedd_outbox_oldest_unsent_age_seconds 0.0" in text

        # Marks lost (say the database was restored from a backup): the rows are sent again
        # and nothing is doubled: each row's key is the idempotency key of its create or
        # trigger, so schedd answers with what it made the first time. Whatever the row's
        # claim history says (attempts and first attempt wiped: a row taken over from a
        # paused relay looks new), the answer is the same.
        t = outbox.outbox_table()
        for wipe in ({}, {"attempts": 0, "first_attempt_ms": None}):
            with engine.begin() as conn:
                conn.execute(update(t).where(t.c.state == "sent").values(state="unsent", **wipe))
            await _drain(outbox.Relay(engine, node.endpoint, FAST), engine=engine)
            again = _rows(engine)
            assert [r.result for r in again] == [r.result for r in rows]
            assert len(await _manual_runs(client, target.id)) == 2
        assert len([j async for j in client.list_jobs(name_prefix=p)]) == 3
    engine.dispose()


async def test_several_relays_share_a_postgresql_outbox(postgres: Any, node: Any) -> None:
    engine = create_engine(postgres.new_database(), pool_size=10)
    outbox.create_table(engine)
    p = uuid.uuid4().hex[:8]
    with engine.begin() as conn:
        for i in range(150):
            outbox.create_job(conn, name=f"{p}-{i:03d}", schedule="@after 1d", handler="h")
    cfg = outbox.RelayConfig(batch=10, poll_s=0.1, lease_s=5, call_timeout_s=2)
    relays = [outbox.Relay(engine, node.endpoint, cfg) for _ in range(3)]
    await _drain(*relays, engine=engine)
    assert sum(r.sent for r in relays) == 150
    async with AsyncClient(node.endpoint) as client:
        jobs = [j async for j in client.list_jobs(name_prefix=p, page_size=1000)]
    assert len(jobs) == 150
    assert {j.id for j in jobs} == {r.result for r in _rows(engine)}
    engine.dispose()


async def test_a_relay_skips_rows_another_holds_locked(postgres: Any, node: Any) -> None:
    """FOR UPDATE SKIP LOCKED: rows another relay is claiming (locked in its transaction) are
    passed over at once, not waited for; they go out when the lock is gone."""
    engine = create_engine(postgres.new_database())
    outbox.create_table(engine)
    p = uuid.uuid4().hex[:8]
    with engine.begin() as conn:
        for i in range(6):
            outbox.create_job(conn, name=f"{p}-{i}", schedule="@after 1d", handler="h")
    t = outbox.outbox_table()
    relay = outbox.Relay(engine, node.endpoint, FAST)
    task = asyncio.ensure_future(relay.run())
    try:
        with engine.begin() as other:  # another relay's claim, caught mid-transaction
            other.execute(select(t.c.id).where(t.c.id <= 3).with_for_update())
            deadline = time.monotonic() + 10
            while _unsent(engine) > 3:
                assert time.monotonic() < deadline, "waited for the locked rows"
                await asyncio.sleep(0.05)
            assert [r.state for r in _rows(engine)] == ["unsent"] * 3 + ["sent"] * 3
        deadline = time.monotonic() + 10
        while _unsent(engine):
            assert time.monotonic() < deadline
            await asyncio.sleep(0.05)
    finally:
        await relay.stop()
        await task
    engine.dispose()


async def test_notify_wakes_the_relay_on_postgresql(postgres: Any, node: Any) -> None:
    engine = create_engine(postgres.new_database())
    outbox.create_table(engine)
    cfg = outbox.RelayConfig(poll_s=30, lease_s=5, call_timeout_s=2)
    relay = outbox.Relay(engine, node.endpoint, cfg)
    task = asyncio.ensure_future(relay.run())
    try:
        await asyncio.sleep(1.0)  # the relay found nothing and waits: for a notification
        p = uuid.uuid4().hex[:8]
        with engine.begin() as conn:
            outbox.create_job(conn, name=f"{p}-woken", schedule="@after 1d", handler="h")
        start = time.monotonic()
        while _unsent(engine):
            assert time.monotonic() - start < 5, "not woken by NOTIFY"
            await asyncio.sleep(0.02)
    finally:
        await relay.stop()
        await task
    engine.dispose()


async def test_the_relay_waits_out_a_database_it_cannot_use(
    tmp_path: Any, node: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """A database that fails (here: the table is not there yet) makes the relay back off and
    log; once it works the relay catches up."""
    caplog.set_level(logging.INFO, "schedd.outbox")
    engine = create_engine(f"sqlite:///{tmp_path / 'app.db'}")
    relay = outbox.Relay(engine, node.endpoint, FAST)
    task = asyncio.ensure_future(relay.run())
    try:
        deadline = time.monotonic() + 10
        while "the database failed" not in caplog.text:
            assert time.monotonic() < deadline
            await asyncio.sleep(0.05)
        outbox.create_table(engine)
        p = uuid.uuid4().hex[:8]
        with engine.begin() as conn:
            outbox.create_job(conn, name=f"{p}-late", schedule="@after 1d", handler="h")
        deadline = time.monotonic() + 10
        while _unsent(engine):
            assert time.monotonic() < deadline
            await asyncio.sleep(0.05)
    finally:
        await relay.stop()
        await task
    assert "working again" in caplog.text
    engine.dispose()

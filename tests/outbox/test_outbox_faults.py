"""Faults with real processes: ``schedd outbox relay`` SIGKILLed after it sent a row and
before it marked it (twice: a trigger, then a create), and the ``schedd node`` SIGKILLed and
started again in the middle of a burst. In the end every committed row made exactly one job or
run in schedd, counted through the client: none lost, none twice."""

from __future__ import annotations

import signal
import time
import uuid
from pathlib import Path
from typing import Any
from urllib.request import urlopen

import pytest
from sqlalchemy import Engine, create_engine, func, select, update

from schedd import outbox
from schedd.client import Client
from schedd.dev import free_port
from schedd.v1 import execution_pb2

pytestmark = pytest.mark.timeout(90)

RELAY_ARGS = ("--poll-s", "0.1", "--call-timeout-s", "1", "--lease-s", "3")


def _states(engine: Engine) -> list[Any]:
    t = outbox.outbox_table()
    with engine.connect() as conn:
        return list(conn.execute(select(t).order_by(t.c.id)).all())


def _wait_all_sent(engine: Engine, timeout_s: float, log: Path) -> list[Any]:
    t = outbox.outbox_table()
    deadline = time.monotonic() + timeout_s
    while True:
        with engine.connect() as conn:
            left = conn.execute(select(func.count()).where(t.c.state != outbox.SENT)).scalar_one()
        if not left:
            return _states(engine)
        assert time.monotonic() < deadline, f"{left} rows not sent:\n{log.read_text()[-3000:]}"
        time.sleep(0.1)


def _wait_stopped_after_send(hook: Path, count: int, proc: Any, log: Path) -> int:
    """Waits until the relay stopped itself after sending its ``count``-th row; its id."""
    deadline = time.monotonic() + 20
    while True:
        ids = hook.read_text().split() if hook.exists() else []
        if len(ids) >= count:
            return int(ids[count - 1])
        assert proc.poll() is None, log.read_text()
        assert time.monotonic() < deadline, log.read_text()
        time.sleep(0.02)


def _metric(listen: str, name: str) -> float:
    with urlopen(f"http://{listen}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    [value] = [ln.split()[-1] for ln in text.splitlines() if ln.startswith(name + " ")]
    return float(value)


def _manual_runs(client: Client, job_id: str) -> list[str]:
    runs = client.list_executions(job_id, limit=1000)
    return [ex.id for ex in runs if ex.trigger == execution_pb2.TRIGGER_MANUAL]


def test_a_relay_killed_between_send_and_mark_doubles_nothing(
    db_url: str, node: Any, relay_proc: Any, tmp_path: Path
) -> None:
    p = uuid.uuid4().hex[:8]
    engine = create_engine(db_url)
    outbox.create_table(engine)
    with Client(node.endpoint) as client:
        target = client.create_job(f"{p}-target", schedule="0 0 1 1 *", handler="h").job
        with engine.begin() as conn:
            outbox.trigger_job(conn, target.id, payload={"k": 1})
            outbox.create_job(conn, name=f"{p}-a", schedule="@after 2d", handler="h")
            outbox.trigger_job(conn, f"{p}-target", payload={"k": 1})
            outbox.create_job(conn, name=f"{p}-b", schedule="@after 2d", handler="h")
        hook, log = tmp_path / "sent-ids", tmp_path / "relay.log"
        stop_env = {outbox.STOP_AFTER_SEND_ENV: str(hook)}
        killed = []
        # One row a claim, held a minute: the first relay stops after sending row 1, the
        # second (row 1 still held by the dead one) after sending row 2.
        one_held = ("--batch", "1", "--poll-s", "0.1", "--call-timeout-s", "1", "--lease-s", "60")
        for n in (1, 2):
            with relay_proc(db_url, node.endpoint, *one_held, env=stop_env, log=log) as proc:
                killed.append(_wait_stopped_after_send(hook, n, proc, log))
                proc.send_signal(signal.SIGKILL)
                proc.wait(10)
        assert killed == [1, 2]
        assert [r.state for r in _states(engine)] == ["unsent"] * 4  # sent, but never marked
        t = outbox.outbox_table()
        with engine.begin() as conn:  # a minute passes: the dead relays' leases run out
            conn.execute(update(t).values(claimed_until_ms=t.c.claimed_until_ms - 60_000))
        with relay_proc(db_url, node.endpoint, *RELAY_ARGS, log=log):
            rows = _wait_all_sent(engine, 30, log)
        # Row 1's trigger went out twice (killed before its mark): its key made one run.
        runs = _manual_runs(client, target.id)
        assert sorted(runs) == sorted([rows[0].result, rows[2].result])
        names = sorted(j.name for j in client.list_jobs(name_prefix=p))
        assert names == [f"{p}-a", f"{p}-b", f"{p}-target"]
    engine.dispose()


def _enqueue_some(engine: Engine, p: str, target_id: str, start: int, n: int) -> None:
    for i in range(start, start + n):
        with engine.begin() as conn:
            if i % 3 == 0:
                outbox.trigger_job(conn, target_id, payload={"i": i})
            else:
                outbox.create_job(conn, name=f"{p}-{i:03d}", schedule="@after 1d", handler="h")
        time.sleep(0.01)


def test_schedd_killed_and_restarted_mid_burst_loses_and_doubles_nothing(
    own_node: Any, relay_proc: Any, tmp_path: Path
) -> None:
    db = f"sqlite:///{tmp_path / 'app.db'}"
    engine = create_engine(db)
    outbox.create_table(engine)
    p = uuid.uuid4().hex[:8]
    log = tmp_path / "relay.log"
    with Client(own_node.endpoint) as client:
        target = client.create_job(f"{p}-target", schedule="0 0 1 1 *", handler="h").job
    metrics = f"127.0.0.1:{free_port()}"
    with relay_proc(db, own_node.endpoint, *RELAY_ARGS, "--metrics-listen", metrics, log=log):
        _enqueue_some(engine, p, target.id, 0, 60)
        own_node.kill()  # mid-burst: the relay is sending what came last
        _enqueue_some(engine, p, target.id, 60, 30)
        time.sleep(1.0)  # the relay backs off meanwhile
        lag = _metric(metrics, "schedd_outbox_oldest_unsent_age_seconds")
        own_node.start()
        _enqueue_some(engine, p, target.id, 90, 30)
        rows = _wait_all_sent(engine, 40, log)
        assert lag > 0.5  # the lag showed while schedd was down
        deadline = time.monotonic() + 5
        while (
            _metric(metrics, "schedd_outbox_unsent_rows")
            or _metric(metrics, "schedd_outbox_rows_sent") != 120
        ):
            assert time.monotonic() < deadline, urlopen(f"http://{metrics}/metrics").read()
            time.sleep(0.1)
    assert len(rows) == 120
    assert "failed (" in log.read_text()  # it saw the outage, backed off, caught up
    with Client(own_node.endpoint) as client:
        runs = _manual_runs(client, target.id)
        jobs = [j for j in client.list_jobs(name_prefix=f"{p}-", page_size=1000)]
    triggers = [r for r in rows if r.action == outbox.ACTION_TRIGGER]
    creates = [r for r in rows if r.action == outbox.ACTION_CREATE]
    assert sorted(runs) == sorted(r.result for r in triggers)  # one run per trigger row
    assert {j.id for j in jobs if j.id != target.id} == {r.result for r in creates}
    assert len(jobs) == len(creates) + 1
    engine.dispose()

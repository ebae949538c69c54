"""Prometheus metrics of a real `schedd node` and `schedd worker` process: served at
/metrics, clean under `promtool check metrics`, and saying what happened (fires, lateness,
outcomes, dead letters, API calls by code, etcd requests, gauges)."""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web
from jobs.conftest import KindsCluster, Seen

from integration.cluster_harness import eventually
from schedd._errors import NotFound
from schedd.dev import free_port

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

SCHEDD = str(Path(sys.executable).parent / "schedd")


def promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        if os.environ.get("CI"):
            pytest.fail("promtool is missing: `make test` installs Debian's prometheus package")
        pytest.skip("promtool not installed (Debian package prometheus)")
    return path


async def scrape(address: str) -> str:
    async with aiohttp.ClientSession() as s, s.get(f"http://{address}/metrics") as r:
        assert r.status == 200
        assert r.headers["Content-Type"].startswith("text/plain")
        return await r.text()


def value(text: str, series: str) -> float:
    """The value of one series (``name{labels}`` exactly as exposed), 0 when absent."""
    for line in text.splitlines():
        if line.startswith(series + " "):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def check_with_promtool(text: str) -> None:
    proc = subprocess.run(
        [promtool(), "check", "metrics"],
        input=text.encode(),
        capture_output=True,
        timeout=30,
        check=False,
    )
    out = (proc.stdout + proc.stderr).decode()
    assert proc.returncode == 0 and not out.strip(), out


async def test_node_and_worker_metrics_are_clean_and_tell_what_happened(
    kinds: KindsCluster,
) -> None:
    promtool()

    async def refuse(request: web.Request, seen: Seen) -> web.StreamResponse:
        return web.Response(status=400 if "bad" in request.path else 200)

    target = await kinds.target(refuse)
    node_metrics = f"127.0.0.1:{free_port()}"
    worker_metrics = f"127.0.0.1:{free_port()}"
    await kinds.start(
        "--metrics-listen", worker_metrics, node_args=("--metrics-listen", node_metrics)
    )
    await kinds.client.create_job("tick", schedule="@every 1s", http=target.url("/ok"))
    await kinds.client.create_job(
        "doomed", schedule="@after 1s", http=target.url("/bad"), max_attempts=1
    )
    with pytest.raises(NotFound):
        await kinds.client.get_job("nope")

    node_text = await eventually(
        lambda: scrape(node_metrics),
        lambda t: (
            value(t, "schedd_fires_total") >= 4 and value(t, "schedd_dead_letters_total") >= 1
        ),
        timeout=30,
        what="fires and a dead letter in the node's metrics",
    )
    worker_text = await eventually(
        lambda: scrape(worker_metrics),
        lambda t: value(t, 'schedd_executions_finished_total{outcome="SUCCEEDED"}') >= 3,
        timeout=20,
        what="successes in the worker's metrics",
    )
    check_with_promtool(node_text)
    check_with_promtool(worker_text)

    n, w = node_text, worker_text
    assert value(n, "schedd_partitions") == 4
    assert value(n, "schedd_partitions_owned") == 4
    assert value(n, "schedd_ownership_changes_total") >= 4
    assert value(n, "schedd_workers_connected") == 1
    for gauge in (
        "schedd_timers",
        "schedd_live_executions",
        "schedd_claim_lead_seconds",
        "schedd_clock_skew_seconds",
        "schedd_dispatch_in_flight",
        "schedd_settle_backlog",
    ):
        assert f"\n{gauge} " in n, gauge  # fmt: skip
    assert "# TYPE schedd_dispatch_held gauge" in n
    assert value(n, 'schedd_grpc_requests_total{code="NOT_FOUND",method="GetJob"}') == 1
    assert value(n, 'schedd_grpc_requests_total{code="OK",method="CreateJob"}') == 2
    assert value(n, 'schedd_store_request_seconds_count{op="txn"}') > 0
    # Held ahead on the worker (ALLOW jobs): counted as fires, their delay is the worker's.
    assert value(n, "schedd_fire_delay_seconds_count") <= value(n, "schedd_fires_total")
    assert 'schedd_build_info{role="node",version=' in n
    # No job or execution id is a label value anywhere.
    assert not re.search(r'="[^"]*@\d+"', n + w)
    assert value(w, "schedd_start_lateness_seconds_count") >= 3
    # Every start was on time within 5 s (held ahead: they start at the instant).
    assert value(w, 'schedd_start_lateness_seconds_bucket{le="5.0"}') == value(
        w, "schedd_start_lateness_seconds_count"
    )
    assert value(w, 'schedd_executions_finished_total{outcome="FAILED_PERMANENT"}') >= 1
    assert value(w, "schedd_worker_in_flight") >= 0
    assert value(w, "schedd_worker_slots_free") <= 32
    assert 'schedd_build_info{role="worker",version=' in w
    assert "schedd_fires_total" not in w  # a worker exposes a worker's metrics only


def test_a_bad_metrics_address_is_refused_in_one_line(tmp_path: Path) -> None:
    proc = subprocess.run(
        [SCHEDD, "node", "--metrics-listen", "nowhere", "--data-dir", str(tmp_path)],
        capture_output=True,
        timeout=30,
        check=False,
    )
    err = proc.stderr.decode()
    assert proc.returncode == 2, err
    assert "--metrics-listen" in err and "HOST:PORT" in err and "Traceback" not in err


async def test_the_worker_refuses_a_taken_metrics_port(kinds: KindsCluster) -> None:
    await kinds.start()
    taken = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    port = taken.sockets[0].getsockname()[1]
    try:
        proc = kinds.add_worker("w1", "--metrics-listen", f"127.0.0.1:{port}")
        await asyncio.to_thread(proc.wait, 20)
        assert not proc.alive
        assert "address already in use" in proc.tail().lower() or "errno" in proc.tail().lower()
    finally:
        taken.close()

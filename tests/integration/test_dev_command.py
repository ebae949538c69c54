"""`schedd dev` (what `make dev` runs): starts, tells what to type, runs a job, stops cleanly;
on the embedded store by default, and on a local etcd with ``--store etcd``."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from schedd.dev import free_port

pytestmark = pytest.mark.timeout(120)

BIN = Path(sys.executable).parent


def _ctl(endpoint: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BIN / "schedctl"), "--endpoints", endpoint, *args],
        check=False,
        capture_output=True,
        text=True,
        timeout=30,
    )


@pytest.mark.parametrize("store", ["rocksdb", "etcd"])
def test_dev_cluster_runs_a_job_and_stops_cleanly(tmp_path: Path, store: str) -> None:
    """On the embedded store (the default: no etcd) and on an etcd process it starts."""
    listen = f"127.0.0.1:{free_port()}"
    argv = [str(BIN / "schedd"), "dev", "--data-dir", str(tmp_path / "dev"), "--listen", listen]
    if store != "rocksdb":
        argv += ["--store", store]
    proc = subprocess.Popen(
        argv,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=dict(os.environ),
    )
    try:
        assert proc.stdout is not None
        lines: list[str] = []
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            lines.append(line)
            if "schedctl job create" in line:
                break
        assert any("schedd dev is running" in ln for ln in lines), lines
        where = next(ln for ln in lines if ln.strip().startswith("store"))
        assert where.split()[1].startswith("rocksdb:" if store == "rocksdb" else "etcd://"), where
        assert (tmp_path / "dev" / "etcd").exists() == (store == "etcd")
        created = _ctl(
            listen,
            "job",
            "create",
            "hi",
            "--schedule",
            "@after 1s",
            "--handler",
            "echo",
            "-o",
            "json",
        )
        assert created.returncode == 0, created.stderr
        job_id = json.loads(created.stdout)["id"]
        metrics = next(ln for ln in lines if ln.strip().startswith("metrics"))
        url = metrics.split()[1]
        assert url.startswith("http://127.0.0.1:") and url.endswith("/metrics"), metrics
        for _ in range(100):
            runs = _ctl(listen, "run", "list", "--job", job_id, "-o", "json")
            if runs.returncode == 0 and any(
                r["state"] == "SUCCEEDED" for r in json.loads(runs.stdout)["executions"]
            ):
                break
            time.sleep(0.2)
        else:
            raise AssertionError(
                f"the demo worker did not run the job: {runs.stdout} {runs.stderr}"
            )
        # The dev node serves the node's and the worker's metrics together.
        with urllib.request.urlopen(url, timeout=10) as resp:
            text = resp.read().decode()
        assert "schedd_fires_total" in text and "schedd_start_lateness_seconds_count" in text
        # The dev node serves the dashboard (read-only by default), its job included.
        dashboard = next(ln for ln in lines if ln.strip().startswith("dashboard"))
        page = dashboard.split()[1]
        assert page.startswith("http://127.0.0.1:") and "read-only" in dashboard, dashboard
        with urllib.request.urlopen(page + "jobs", timeout=10) as resp:
            html = resp.read().decode()
            assert resp.headers["Content-Security-Policy"].startswith("default-src 'self'")
        assert job_id in html and ">hi<" in html
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(30)
    assert code == 0

"""scripts/cluster-up, cluster-status and cluster-down, run as a user runs them.

A real local cluster (3 etcd members, 3 nodes, 2 workers) in a temporary directory on free
loopback ports: up makes it whole, status shows it (table and JSON), a job created against it
runs, down leaves no process behind; ``up --tls`` does the same with TLS everywhere. Bad
configuration is one line on stderr and exit 1.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from schedd.dev import port_is_free

pytestmark = [pytest.mark.timeout(120), pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = ROOT / "scripts"
BIN = Path(sys.executable).parent
NODES = ["node-1", "node-2", "node-3"]
WORKERS = ["worker-1", "worker-2"]
PARTITIONS = 12  # cluster/local.ini

if not (ROOT / "cluster" / "local.ini").exists():  # pragma: no cover - a broken checkout
    pytest.skip("cluster/local.ini missing", allow_module_level=True)


def _free_base_port() -> int:
    """A base port B with B..B+5 (etcd) and B+10..B+12 (nodes) free a moment ago."""
    rng = random.Random()
    for _ in range(200):
        base = rng.randrange(20_000, 60_000, 20)
        ports = [base + i for i in range(6)] + [base + 10 + i for i in range(3)]
        if all(port_is_free(p) for p in ports):
            return base
    raise RuntimeError("no free block of ports on 127.0.0.1")


def _env(cluster_dir: Path, base_port: int, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SCHEDD_")}
    env.update(
        SCHEDD_PYTHON=sys.executable,
        SCHEDD_CLUSTER_DIR=str(cluster_dir),
        SCHEDD_CLUSTER_BASE_PORT=str(base_port),
    )
    return {**env, **extra}


def _script(
    name: str, env: dict[str, str], *args: str, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(SCRIPTS / name), *args],
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=timeout,
    )


def _alive(pid: int) -> bool:
    """A process that exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rpartition(")")[2].split()[0] not in ("Z", "X")


def _pids(cluster_dir: Path) -> dict[Path, int]:
    out: dict[Path, int] = {}
    for pid_file in cluster_dir.rglob("*.pid"):
        with contextlib.suppress(ValueError):
            out[pid_file] = int(pid_file.read_text().strip())
    return out


@contextlib.contextmanager
def _started(tmp_path: Path, *up_args: str) -> Iterator[tuple[Path, dict[str, str], str]]:
    """A started local cluster: its directory, the environment the scripts need and what
    cluster-up printed.

    At the end cluster-down runs; whatever still runs after it (a failed test) is killed by
    its pid file, so no test leaves processes behind.
    """
    if subprocess.run(["which", "etcd"], capture_output=True, check=False).returncode != 0:
        pytest.skip("etcd is not on PATH")
    cluster_dir = tmp_path / "cluster"
    env = _env(cluster_dir, _free_base_port())
    try:
        up = _script("cluster-up", env, *up_args, timeout=90)
        assert up.returncode == 0, f"cluster-up failed:\n{up.stdout}\n{up.stderr}"
        assert "whole after" in up.stdout, up.stdout
        yield cluster_dir, env, up.stdout
    finally:
        _script("cluster-down", env, timeout=60)
        for pid in _pids(cluster_dir).values():
            if _alive(pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[tuple[Path, dict[str, str]]]:
    """A started local cluster: its directory and the environment the scripts need."""
    with _started(tmp_path) as (cluster_dir, env, _):
        yield cluster_dir, env


def _check_status_json(status: dict[str, Any]) -> None:
    assert status["problems"] == []
    members = status["etcd"]["members"]
    assert [m["name"] for m in members] == ["m0", "m1", "m2"]
    assert all(m["healthy"] for m in members)
    assert sum(m["leader"] for m in members) == 1
    assert all(0 < m["db_size_in_use"] <= m["db_size"] for m in members), members
    running = {p["name"]: p["pid"] for p in status["processes"]}
    assert set(running) == {"m0", "m1", "m2", *NODES, *WORKERS}
    assert all(isinstance(pid, int) for pid in running.values()), running
    cluster = status["cluster"]
    assert sorted(n["node_id"] for n in cluster["nodes"]) == NODES
    assert cluster["partition_count"] == PARTITIONS
    parts = cluster["partitions"]
    assert sorted(p["partition"] for p in parts) == list(range(PARTITIONS))
    assert {p["owner"] for p in parts} <= set(NODES)
    assert all(int(p["epoch"]) > 0 for p in parts), parts
    assert status["workers"] == {w: NODES for w in WORKERS}
    # Every node rewrites its record every 2 s, so each clock was measured, and on one machine
    # the skew is far inside the limit.
    assert sorted(status["clock_skew_ms"]) == NODES
    assert all(abs(s) < status["max_clock_skew_ms"] for s in status["clock_skew_ms"].values())


def _check_status_table(text: str) -> None:
    for heading in ("processes", "etcd members", "nodes (clock skew", "partitions", "workers"):
        assert heading in text, text
    assert f"partitions ({PARTITIONS} of {PARTITIONS} owned)" in text
    lines = text.splitlines()
    for node in NODES:
        # The node row: name, address, partition count, skew in ms, offset in ms.
        row = next(ln for ln in lines if ln.split()[:1] == [node] and " ms" in ln)
        assert row.count(" ms") == 2, row
    for worker in WORKERS:
        assert any(ln.split()[:1] == [worker] and "node-1, node-2, node-3" in ln for ln in lines)
    assert sum(1 for ln in lines if "leader" in ln.split()) == 1
    assert "IN USE" in text
    assert text.rstrip().endswith("connected to every node"), text


def _ctl(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BIN / "schedctl"), *args],
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=30,
    )


def _runs_a_job(env: dict[str, str], addresses: list[str]) -> None:
    """A job created through every node's address runs once its second has come.

    The run list is cluster-wide: every node answers with the finished run, whichever node
    ran it.
    """
    created = _ctl(
        env,
        "--endpoints",
        ",".join(addresses),
        *("job", "create", "hi", "--schedule", "@after 1s", "--handler", "echo", "-o", "json"),
    )
    assert created.returncode == 0, created.stderr
    job_id = json.loads(created.stdout)["id"]
    states: dict[str, list[str]] = {}
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        for address in addresses:
            runs = _ctl(env, "--endpoints", address, "run", "list", "--job", job_id, "-o", "json")
            if runs.returncode == 0:
                answer = json.loads(runs.stdout)
                states[address] = [r["state"] for r in answer["executions"]]
        if all("SUCCEEDED" in states.get(a, []) for a in addresses):
            return
        time.sleep(0.2)
    raise AssertionError(f"job {job_id} did not run on the local cluster: {states}")


def test_up_status_job_down(cluster: tuple[Path, dict[str, str]]) -> None:
    cluster_dir, env = cluster

    as_json = _script("cluster-status", env, "-o", "json")
    assert as_json.returncode == 0, as_json.stdout + as_json.stderr
    _check_status_json(json.loads(as_json.stdout))

    table = _script("cluster-status", env)
    assert table.returncode == 0, table.stdout + table.stderr
    _check_status_table(table.stdout)

    _runs_a_job(env, [n["address"] for n in json.loads(as_json.stdout)["cluster"]["nodes"]])

    pids = _pids(cluster_dir)
    assert len(pids) == 3 + len(NODES) + len(WORKERS), pids
    started = time.monotonic()
    down = _script("cluster-down", env)
    assert down.returncode == 0, down.stderr
    assert time.monotonic() - started < 30
    for name in ("m0", "m1", "m2", *NODES, *WORKERS):
        assert f"{name} stopped" in down.stdout, down.stdout  # gracefully, not killed
    assert [pid for pid in pids.values() if _alive(pid)] == []
    assert _pids(cluster_dir) == {}

    after = _script("cluster-status", env, "--no-skew")
    assert after.returncode == 1
    assert "node node-1 is not running" in after.stdout


def test_up_with_tls_everywhere(tmp_path: Path) -> None:
    with _started(tmp_path, "--tls") as (cluster_dir, env, printed):
        certs = cluster_dir / "tls"
        assert f"export SCHEDCTL_CACERT={certs}/ca.pem" in printed
        assert all(p.stat().st_mode & 0o077 == 0 for p in certs.glob("*-key.pem"))
        # Status reaches etcd (client certificates required) and every node (mutual TLS).
        status = _script("cluster-status", env, "-o", "json", "--no-skew")
        assert status.returncode == 0, status.stdout + status.stderr
        doc = json.loads(status.stdout)
        assert doc["problems"] == [], doc["problems"]
        assert all(m["healthy"] for m in doc["etcd"]["members"])
        assert all(url.startswith("https://") for m in doc["etcd"]["members"]
                   for url in m["client_urls"])  # fmt: skip
        assert doc["workers"] == {w: NODES for w in WORKERS}
        addresses = [n["address"] for n in doc["cluster"]["nodes"]]
        plain = _ctl(env, "--endpoints", addresses[0], "cluster", "status")
        assert plain.returncode == 5 and "speaks TLS: pass --cacert" in plain.stderr
        tls = {
            "SCHEDCTL_CACERT": str(certs / "ca.pem"),
            "SCHEDCTL_CERT": str(certs / "client.pem"),
            "SCHEDCTL_KEY": str(certs / "client-key.pem"),
        }
        _runs_a_job({**env, **tls}, addresses)
        down = _script("cluster-down", env)
        assert down.returncode == 0 and "node-1 stopped" in down.stdout, down.stdout


def test_status_without_a_cluster_says_so(tmp_path: Path) -> None:
    env = _env(tmp_path / "none", _free_base_port())
    result = _script("cluster-status", env, "-o", "json")
    assert result.returncode == 1
    assert json.loads(result.stdout)["problems"] == [
        f"no cluster in {tmp_path / 'none'} (scripts/cluster-up starts one)"
    ]


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        ("SCHEDD_CLUSTER_ETCD_MEMBERS", "2", "etcd_members: 1, 3 or 5, got 2"),
        ("SCHEDD_CLUSTER_NODES", "three", "nodes: 'three' is not a whole number"),
        ("SCHEDD_CLUSTER_BASE_PORT", "80", "base_port: 80 leaves no room for every port"),
        ("SCHEDD_CLUSTER_LOG_LEVEL", "loud", "log_level: debug, info or warning, got 'loud'"),
    ],
)
def test_bad_config_is_one_line(tmp_path: Path, variable: str, value: str, message: str) -> None:
    env = _env(tmp_path / "c", _free_base_port(), **{variable: value})
    for script in ("cluster-up", "cluster-status", "cluster-down"):
        result = _script(script, env)
        assert result.returncode == 1, (script, result.stdout)
        assert result.stderr == f"{script}: error: {message}\n"
    assert not (tmp_path / "c").exists()  # nothing started, nothing written


def test_missing_config_file_is_one_line(tmp_path: Path) -> None:
    missing = tmp_path / "nope.ini"
    env = _env(tmp_path / "c", _free_base_port(), SCHEDD_CLUSTER_CONFIG=str(missing))
    result = _script("cluster-up", env)
    assert result.returncode == 1
    assert result.stderr == f"cluster-up: error: config: cannot read {missing}\n"


def test_a_taken_port_stops_up_before_anything_starts(tmp_path: Path) -> None:
    if subprocess.run(["which", "etcd"], capture_output=True, check=False).returncode != 0:
        pytest.skip("etcd is not on PATH")
    base = _free_base_port()
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        taken.bind(("127.0.0.1", base + 11))  # node-2's port
        taken.listen()
        result = _script("cluster-up", _env(tmp_path / "c", base))
    assert result.returncode == 1
    assert result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.startswith(f"cluster-up: error: port {base + 11} (node-2) is taken")
    assert _pids(tmp_path / "c") == {}

"""Real schedd parts for the e2e benchmark: a store (etcd, or the node's embedded RocksDB), one
node process, one worker process.

Every child is started in its own session and registered with :class:`Children`, which stops
them (SIGTERM, then SIGKILL after a bound) at the end of each workload and again at exit.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

from schedd.client import Client
from schedd.dev import EtcdProcess, free_port
from schedd.store import KV, EtcdConfig, connect_etcd, prefix_end

T = TypeVar("T")
REPO = Path(__file__).resolve().parents[2]
BENCH_DIR = Path(__file__).resolve().parent
#: ``schedd`` of the interpreter running the benchmark (whatever venv or install it is).
SCHEDD = [sys.executable, "-m", "schedd.cli.schedd_main"]
PREFIX = b"/schedd/v1/"
PARTITIONS = 16
NODE_ID = "bench"
#: The node's and the worker's log level (``SCHEDD_BENCH_LOG=debug`` to follow an execution).
LOG_LEVEL = os.environ.get("SCHEDD_BENCH_LOG", "warning")
#: Extra ``schedd node`` flags for a tuning experiment (``SCHEDD_BENCH_NODE_ARGS``).
NODE_ARGS = os.environ.get("SCHEDD_BENCH_NODE_ARGS", "").split()
#: Extra ``schedd worker`` flags (``SCHEDD_BENCH_WORKER_ARGS``), e.g. ``--metrics-listen``.
WORKER_ARGS = os.environ.get("SCHEDD_BENCH_WORKER_ARGS", "").split()
_CLK_TCK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process so far, in seconds (``/proc/<pid>/stat``)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / _CLK_TCK  # fields 14 and 15 of stat(5)


def rss_mib(pid: int) -> float:
    """Resident set size of a process in MiB (``VmRSS`` of ``/proc/<pid>/status``)."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return round(int(line.split()[1]) / 1024, 1)
    return 0.0


class Children:
    """The benchmark's child processes; :meth:`stop_all` is safe to call any number of times."""

    def __init__(self) -> None:
        self.procs: list[subprocess.Popen[bytes]] = []
        self.etcds: list[EtcdProcess] = []

    def spawn(
        self, args: list[str], log_path: Path, env: dict[str, str] | None = None
    ) -> subprocess.Popen[bytes]:
        with open(log_path, "ab") as log:
            proc = subprocess.Popen(
                args, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
            )
        self.procs.append(proc)
        return proc

    @staticmethod
    def stop(proc: subprocess.Popen[bytes], timeout_s: float = 5.0) -> None:
        if proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)

    def stop_all(self) -> None:
        for proc in reversed(self.procs):
            self.stop(proc)
        self.procs.clear()
        for etcd in self.etcds:
            etcd.stop()
        self.etcds.clear()


def etcd_metrics(endpoint: str) -> dict[str, float]:
    """The mvcc counters and the current revision from etcd's Prometheus endpoint."""
    wanted = {
        "etcd_mvcc_txn_total": "txn",
        "etcd_mvcc_put_total": "put",
        "etcd_mvcc_delete_total": "delete",
        "etcd_debugging_mvcc_current_revision": "revision",
        "etcd_disk_wal_write_bytes_total": "wal_bytes",
    }
    with urllib.request.urlopen(f"http://{endpoint}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    out: dict[str, float] = {}
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if name in wanted:
            out[wanted[name]] = float(value)
    return out


class EtcdProbe:
    """Cheap reads of the runs/ keys through the store facade, on a private event loop thread."""

    def __init__(self, endpoint: str) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        self._etcd: KV = self._run(connect_etcd(EtcdConfig(endpoints=(endpoint,), timeout_s=30)))
        self._runs = PREFIX + b"runs/"

    def _run(self, coro: Coroutine[Any, Any, T], timeout_s: float = 60.0) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout_s)

    def runs_count(self) -> int:
        """How many executions etcd holds (claimed and not yet finished)."""
        return self._run(self._etcd.count(self._runs, prefix_end(self._runs)))

    def runs_scheduled_before(self, end_ms: int) -> int:
        """How many executions etcd holds whose scheduled fire is before ``end_ms``."""

        async def scan() -> int:
            kvs, _ = await self._etcd.range_all(
                self._runs, prefix_end(self._runs), page=10_000, keys_only=True
            )
            return sum(1 for kv in kvs if int(kv.key.rpartition(b"/")[2]) < end_ms)

        return self._run(scan())

    def close(self) -> None:
        try:
            self._run(self._etcd.close(), 10)
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(5)


class Cluster:
    """A fresh store, one node process and one worker process under ``root``.

    ``store``: ``etcd`` (an etcd process of its own) or ``rocksdb`` (the node's embedded
    store, in ``root/store``; :attr:`etcd` is None then).
    """

    def __init__(
        self,
        root: Path,
        children: Children,
        capacity: int,
        jitter_ms: int = 0,
        prefetch: int = 0,
        store: str = "etcd",
    ) -> None:
        self.root = root
        self.jitter_ms = jitter_ms
        self.children = children
        self.capacity = capacity
        self.prefetch = prefetch
        self.record = root / "starts.txt"
        self.port = free_port()
        self.etcd = EtcdProcess(root / "etcd") if store == "etcd" else None
        self.node: subprocess.Popen[bytes] | None = None
        self.worker: subprocess.Popen[bytes] | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout_s: float = 60.0) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        if self.etcd is not None:
            self.children.etcds.append(self.etcd)
            self.etcd.start()
            store = f"etcd://{self.etcd.endpoint}"
        else:
            store = f"rocksdb:{self.root / 'store'}"
        self.node = self.children.spawn(
            [*SCHEDD, "--log-level", LOG_LEVEL, "node", "--store", store,
             "--listen", self.address, "--node-id", NODE_ID, "--data-dir", str(self.root / "node"),
             "--partitions", str(PARTITIONS), *NODE_ARGS],
            self.root / "node.log",
        )  # fmt: skip
        env = dict(os.environ, E2E_RECORD=str(self.record), E2E_JITTER_MS=str(self.jitter_ms))
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(BENCH_DIR), env.get("PYTHONPATH")) if p)
        self.worker = self.children.spawn(
            [*SCHEDD, "--log-level", LOG_LEVEL, "worker", "--connect", self.address,
             "--import", "_e2e_handlers", "--worker-id", "bench-worker",
             "--capacity", str(self.capacity), "--prefetch", str(self.prefetch),
             "--data-dir", str(self.root / "worker"), *WORKER_ARGS],
            self.root / "worker.log", env,
        )  # fmt: skip
        self._wait_ready(timeout_s)

    def _wait_ready(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        last = "no answer"
        with Client(self.address, timeout_s=2) as client:
            while time.monotonic() < deadline:
                for name, proc in (("node", self.node), ("worker", self.worker)):
                    if proc is not None and proc.poll() is not None:
                        raise RuntimeError(
                            f"{name} exited with {proc.returncode}: {self.log_tail(name)}"
                        )
                try:
                    st = client.cluster_status()
                    owned = sum(1 for p in st.partitions if p.owner == NODE_ID)
                    workers = len(st.workers)
                    last = f"{owned}/{PARTITIONS} partitions owned, {workers} workers"
                    if owned == PARTITIONS and workers >= 1:
                        return
                except Exception as exc:
                    last = f"{type(exc).__name__}: {exc}"
                time.sleep(0.2)
        raise RuntimeError(f"cluster not ready in {timeout_s}s ({last})")

    def pids(self) -> dict[str, int]:
        """The process id of each part that runs: ``node``, ``worker`` and ``etcd``."""
        out = {}
        etcd = self.etcd.proc if self.etcd is not None else None
        for name, proc in (("node", self.node), ("worker", self.worker), ("etcd", etcd)):
            if proc is not None and proc.poll() is None:
                out[name] = proc.pid
        return out

    def cpu(self) -> dict[str, float]:
        """CPU seconds (user + system) each part has used so far, and the wall clock (``_wall``)."""
        out = {name: cpu_seconds(pid) for name, pid in self.pids().items()}
        out["_wall"] = time.monotonic()
        out["_epoch_ns"] = time.time_ns()
        return out

    def rss(self) -> dict[str, float]:
        """Resident memory of each part in MiB."""
        return {name: rss_mib(pid) for name, pid in self.pids().items()}

    def log_tail(self, name: str, chars: int = 1500) -> str:
        path = self.root / f"{name}.log"
        return path.read_text(errors="replace")[-chars:] if path.exists() else ""

    def stop(self) -> None:
        for proc in (self.worker, self.node):
            if proc is not None:
                self.children.stop(proc)
        if self.etcd is not None:
            self.etcd.stop()


def cpu_cost(c0: dict[str, float], c1: dict[str, float], fires: int) -> dict[str, float]:
    """Per part, CPU-µs per fire and cores used between two :meth:`Cluster.cpu` readings."""
    out: dict[str, float] = {}
    wall = c1["_wall"] - c0["_wall"]
    total = 0.0
    for name in ("node", "worker", "etcd"):
        if name in c0 and name in c1:
            spent = c1[name] - c0[name]
            total += spent
            if fires:
                out[f"{name}_cpu_us_per_fire"] = round(spent / fires * 1e6, 1)
            out[f"{name}_cores"] = round(spent / wall, 2) if wall > 0 else 0.0
    if fires:
        out["total_cpu_us_per_fire"] = round(total / fires * 1e6, 1)
    return out


class StartLog:
    """Follows the worker's record file: counts lines as they arrive, parses at the end."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._offset = 0
        self.lines = 0

    def poll(self) -> int:
        if not self.path.exists():
            return self.lines
        with open(self.path, "rb") as f:
            f.seek(self._offset)
            data = f.read()
        end = data.rfind(b"\n") + 1  # count whole lines only
        self._offset += end
        self.lines += data.count(b"\n", 0, end)
        return self.lines

    def records(self) -> list[tuple[str, int, int]]:
        """(execution id, scheduled ms, start ns) of every recorded start."""
        out = []
        if not self.path.exists():
            return out
        with open(self.path) as f:
            for line in f:
                parts = line.split()
                if len(parts) == 3:
                    out.append((parts[0], int(parts[1]), int(parts[2])))
        return out

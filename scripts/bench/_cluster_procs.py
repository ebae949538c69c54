"""The cluster benchmark's processes: 3 ``schedd node`` and 2 ``schedd worker`` over one etcd.

Nodes are ``n0..n2`` on fixed loopback ports (kept across restarts, so workers find them again),
logging at info level: the benchmark reads the ownership lines (``node nX claimed [...] at
epoch E``, ``partition p: loaded k due entries ...``) with their timestamps to split a
takeover into its steps. Workers run the e2e benchmark's recording no-op handler
(``_e2e_handlers``), each into its own record file. Children are registered with
:class:`~_e2e_cluster.Children`, which stops them at the end and at exit.

Also here: CPU and RSS of a process from ``/proc``, and :class:`Records`, the workers' record
files read incrementally (each line parsed once, however often the benchmark polls).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from _e2e_cluster import BENCH_DIR, SCHEDD, Children

from schedd.client import Client
from schedd.dev import free_port
from schedd.v1 import scheduler_pb2

T = TypeVar("T")


def wait_for(probe: Callable[[], T | None], timeout_s: float, what: str, every: float = 0.05) -> T:
    """Polls ``probe`` until it returns something other than None (exceptions count as None)."""
    deadline = time.monotonic() + timeout_s
    last: object = None
    while time.monotonic() < deadline:
        try:
            value = probe()
        except Exception as exc:
            last = exc
        else:
            if value is not None:
                return value
        time.sleep(every)
    raise RuntimeError(f"timed out after {timeout_s:.0f}s waiting for {what} (last: {last!r})")


_TS = r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),(\d{3}) "
_CLAIMED = re.compile(_TS + r".*node (\S+) claimed \[([\d, ]*)\] at epoch (\d+)")
_LOADED = re.compile(_TS + r".*partition (\d+): loaded (\d+) due entries, adopted (\d+) live")
_SERVING = re.compile(_TS + r".*node (\S+) serving on")
_RELEASED = re.compile(_TS + r".*partition (\d+) released \(([^)]*)\)")


def _ts(date: str, ms: str) -> float:
    """A log line's ``asctime`` (local time, as ``logging`` writes it) as epoch seconds."""
    return time.mktime(time.strptime(date, "%Y-%m-%d %H:%M:%S")) + int(ms) / 1000.0


@dataclass
class NodeLog:
    """What one node's log says about partitions it took, since a given instant."""

    claimed: dict[int, float] = field(default_factory=dict)  # partition -> when claimed
    loaded: dict[int, tuple[float, int]] = field(default_factory=dict)  # -> (when, entries)
    serving: float | None = None


def read_node_log(path: Path, since: float) -> NodeLog:
    out = NodeLog()
    if not path.exists():
        return out
    for line in path.read_text(errors="replace").splitlines():
        if m := _CLAIMED.match(line):
            at = _ts(m[1], m[2])
            if at >= since:
                for p in m[4].split(","):
                    if p.strip():
                        out.claimed.setdefault(int(p), at)
        elif m := _LOADED.match(line):
            at = _ts(m[1], m[2])
            if at >= since:
                out.loaded.setdefault(int(m[3]), (at, int(m[4])))
        elif (m := _SERVING.match(line)) and _ts(m[1], m[2]) >= since:
            out.serving = _ts(m[1], m[2])
    return out


def read_ownership(paths: list[Path]) -> dict[int, list[tuple[float, str]]]:
    """Per partition, every change of hands the nodes logged, in time order: ``(when, what)``
    with what = ``claimed by nX`` or ``released (rebalance | shutdown | session lost ...)``."""
    out: dict[int, list[tuple[float, str]]] = {}
    for path in paths:
        if not path.exists():
            continue
        for line in path.read_text(errors="replace").splitlines():
            if m := _RELEASED.match(line):
                out.setdefault(int(m[3]), []).append((_ts(m[1], m[2]), f"released ({m[4]})"))
            elif m := _CLAIMED.match(line):
                for p in m[4].split(","):
                    if p.strip():
                        out.setdefault(int(p), []).append((_ts(m[1], m[2]), f"claimed by {m[3]}"))
    for events in out.values():
        events.sort()
    return out


class BenchCluster:
    """Nodes ``n0..`` and workers ``w0..`` as child processes over ``etcd_endpoint``."""

    def __init__(
        self,
        root: Path,
        children: Children,
        etcd_endpoint: str,
        *,
        partitions: int,
        session_ttl_s: int,
        jitter_ms: int,
        capacity: int = 4096,
        prefetch: int = 131072,
    ) -> None:
        self.root = root
        self.children = children
        self.etcd_endpoint = etcd_endpoint
        self.partitions = partitions
        self.session_ttl_s = session_ttl_s
        self.jitter_ms = jitter_ms
        self.capacity = capacity
        self.prefetch = prefetch
        self.ports: dict[str, int] = {}
        self.nodes: dict[str, subprocess.Popen[bytes]] = {}
        self.workers: dict[str, subprocess.Popen[bytes]] = {}
        self._clients: dict[str, Client] = {}
        #: Nodes the benchmark killed and has not started again (not an error when dead).
        self.killed: set[str] = set()

    def address(self, node: str) -> str:
        return f"127.0.0.1:{self.ports[node]}"

    def log_path(self, name: str) -> Path:
        return self.root / f"{name}.log"

    def record_path(self, worker: str) -> Path:
        return self.root / f"starts-{worker}.txt"

    def start_node(self, name: str) -> None:
        self.killed.discard(name)
        port = self.ports.setdefault(name, free_port())
        self.nodes[name] = self.children.spawn(
            [*SCHEDD, "--log-level", os.environ.get("SCHEDD_BENCH_LOG", "info"), "node",
             "--etcd", self.etcd_endpoint,
             "--listen", f"127.0.0.1:{port}", "--node-id", name,
             "--data-dir", str(self.root / name), "--partitions", str(self.partitions),
             "--session-ttl", str(self.session_ttl_s)],
            self.log_path(name),
        )  # fmt: skip

    def start_worker(self, name: str) -> None:
        env = dict(
            os.environ, E2E_RECORD=str(self.record_path(name)), E2E_JITTER_MS=str(self.jitter_ms)
        )
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(BENCH_DIR), env.get("PYTHONPATH")) if p)
        self.workers[name] = self.children.spawn(
            [*SCHEDD, "--log-level", os.environ.get("SCHEDD_BENCH_LOG", "warning"), "worker",
             "--connect", ",".join(self.address(n) for n in sorted(self.nodes)),
             "--import", "_e2e_handlers", "--worker-id", name,
             "--capacity", str(self.capacity), "--prefetch", str(self.prefetch),
             "--data-dir", str(self.root / name)],
            self.log_path(name), env,
        )  # fmt: skip

    def kill(self, name: str) -> None:
        proc = self.nodes[name]
        self.killed.add(name)
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)

    def client(self, node: str) -> Client:
        if node not in self._clients:
            self._clients[node] = Client(self.address(node), timeout_s=5)
        return self._clients[node]

    def status(self, via: str) -> scheduler_pb2.ClusterStatus:
        return self.client(via).cluster_status()

    def owners(self, via: str) -> dict[int, str]:
        return {p.partition: p.owner for p in self.status(via).partitions}

    def alive(self) -> list[str]:
        return sorted(n for n, p in self.nodes.items() if p.poll() is None)

    def check_alive(self) -> None:
        for name, proc in {**self.nodes, **self.workers}.items():
            if proc.poll() is not None and name not in self.killed:
                tail = self.log_path(name).read_text(errors="replace")[-1500:]
                raise RuntimeError(f"{name} exited with {proc.returncode}: {tail}")

    def wait_balanced(self, nodes: list[str], timeout_s: float = 60.0) -> dict[int, str]:
        """Until every partition is owned, each of ``nodes`` owning its share (P / N)."""
        share = self.partitions // len(nodes)
        counts: dict[str, int] = {}

        def probe() -> dict[int, str] | None:
            self.check_alive()
            owners = self.owners(nodes[0])
            counts.clear()
            for owner in owners.values():
                counts[owner or "(none)"] = counts.get(owner or "(none)", 0) + 1
            ok = all(counts.get(n, 0) >= share for n in nodes)
            return (
                owners if ok and sum(counts.get(n, 0) for n in nodes) == self.partitions else None
            )

        try:
            return wait_for(probe, timeout_s, f"{nodes} to own {self.partitions} partitions")
        except RuntimeError as exc:
            raise RuntimeError(f"{exc}; partitions owned: {counts}") from None

    def wait_workers(self, timeout_s: float = 60.0) -> None:
        """Until every live node has a stream from every worker."""

        def probe() -> bool | None:
            self.check_alive()
            for node in self.alive():
                ids = {w.worker_id for w in self.status(node).workers}
                if not set(self.workers) <= ids:
                    return None
            return True

        wait_for(probe, timeout_s, "every worker to reach every node", every=0.2)

    def close(self) -> None:
        for client in self._clients.values():
            client.close()
        self._clients.clear()


class Records:
    """Every start the workers recorded so far: ``(execution id, due ms, start ns)``."""

    def __init__(self, paths: list[Path]) -> None:
        self.paths = paths
        self._offsets = {p: 0 for p in paths}
        self.rows: list[tuple[str, int, int]] = []

    def poll(self) -> list[tuple[str, int, int]]:
        for path in self.paths:
            if not path.exists():
                continue
            with open(path, "rb") as f:
                f.seek(self._offsets[path])
                data = f.read()
            end = data.rfind(b"\n") + 1  # whole lines only
            self._offsets[path] += end
            for line in data[:end].decode().splitlines():
                eid, due, ns = line.split()
                self.rows.append((eid, int(due), int(ns)))
        return self.rows

"""Real schedd processes for the cluster tests: nodes and workers, started, killed, paused.

A :class:`ClusterProcs` runs ``schedd node`` and ``schedd worker`` as child processes of the
test (each in its own session, logs in its directory), against a real etcd cluster reached
through one :class:`~cluster.proxy.Proxy` per (node, member), so a test can cut one node off
from etcd. Faults are real signals: :meth:`kill` (SIGKILL), :meth:`term` (SIGTERM, waits
for the exit), :meth:`pause` / :meth:`resume` (SIGSTOP / SIGCONT). A node keeps its port and
data dir across restarts, so workers reconnect to the same address.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from cluster.proxy import Proxy

from schedd.client import Client
from schedd.dev import free_port

T = TypeVar("T")
TESTS_DIR = Path(__file__).resolve().parents[1]
SCHEDD = [sys.executable, "-m", "schedd.cli.schedd_main"]
SCHEDCTL = [sys.executable, "-c", "from schedd.cli.schedctl import main; main()"]


def wait_for(probe: Callable[[], T], ok: Callable[[T], bool], *, timeout: float, what: str) -> T:
    """Polls ``probe`` until ``ok(value)``; fails naming ``what`` and the last value."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            value = probe()
        except Exception as exc:  # a node mid-restart answers UNAVAILABLE: try again
            value = exc  # type: ignore[assignment]
        else:
            if ok(value):
                return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}: {value!r}")
        time.sleep(0.1)


@dataclass
class Proc:
    name: str
    argv: list[str]
    env: dict[str, str]
    log: Path
    popen: subprocess.Popen[bytes] | None = None
    events: list[tuple[float, str]] = field(default_factory=list)

    def start(self) -> None:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        out = self.log.open("ab")
        out.write(f"\n=== start {time.strftime('%H:%M:%S')} ===\n".encode())
        out.flush()
        self.popen = subprocess.Popen(
            self.argv, stdout=out, stderr=subprocess.STDOUT, env=self.env, start_new_session=True
        )
        out.close()
        self._note("start")

    @property
    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def signal(self, sig: int) -> None:
        assert self.popen is not None
        with contextlib.suppress(ProcessLookupError):
            self.popen.send_signal(sig)
        self._note(signal.Signals(sig).name)

    def wait(self, timeout: float) -> int:
        assert self.popen is not None
        return self.popen.wait(timeout)

    def tail(self, lines: int = 40) -> str:
        try:
            text = self.log.read_text(errors="replace").splitlines()
        except FileNotFoundError:
            return ""
        return "\n".join(text[-lines:])

    def _note(self, what: str) -> None:
        self.events.append((time.time(), what))


class ClusterProcs:
    """Nodes ``n0..`` and workers ``w0..`` as real processes over ``etcd_endpoints``."""

    def __init__(
        self,
        root: Path,
        etcd_endpoints: tuple[str, ...],
        prefix: str,
        effects_db: Path,
        *,
        partitions: int = 8,
        session_ttl_s: int = 2,
        lease_timeout_ms: int = 3_000,
        heartbeat_interval_ms: int = 1_000,
    ) -> None:
        self.root = root
        self.etcd_endpoints = etcd_endpoints
        self.prefix = prefix
        self.effects_db = effects_db
        self.partitions = partitions
        self.session_ttl_s = session_ttl_s
        self.lease_timeout_ms = lease_timeout_ms
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.procs: dict[str, Proc] = {}
        self.ports: dict[str, int] = {}
        self.proxies: dict[str, list[Proxy]] = {}
        self._clients: list[Client] = []

    # -- starting ---------------------------------------------------------------------

    def node_address(self, name: str) -> str:
        return f"127.0.0.1:{self.ports[name]}"

    @property
    def node_names(self) -> list[str]:
        return [n for n in self.procs if n.startswith("n")]

    def add_node(self, name: str, *, extra_env: dict[str, str] | None = None) -> Proc:
        port = self.ports.setdefault(name, free_port())
        proxies = self.proxies.setdefault(name, [Proxy(e) for e in self.etcd_endpoints])
        argv = [
            *SCHEDD, "node",
            "--etcd", ",".join(p.endpoint for p in proxies),
            "--listen", f"127.0.0.1:{port}",
            "--node-id", name,
            "--data-dir", str(self.root / name),
            "--partitions", str(self.partitions),
            "--prefix", self.prefix,
            "--session-ttl", str(self.session_ttl_s),
            "--lease-timeout-ms", str(self.lease_timeout_ms),
            "--heartbeat-interval-ms", str(self.heartbeat_interval_ms),
        ]  # fmt: skip
        level = os.environ.get("SCHEDD_CLUSTER_LOG", "info")
        env = {**os.environ, "SCHEDD_LOG_LEVEL": level, **(extra_env or {})}
        proc = Proc(name, argv, env, self.root / "logs" / f"{name}.log")
        self.procs[name] = proc
        proc.start()
        return proc

    def add_worker(self, name: str, *, capacity: int = 32) -> Proc:
        argv = [
            *SCHEDD, "worker",
            "--connect", ",".join(self.node_address(n) for n in self.node_names),
            "--import", "cluster.effect_handlers",
            "--worker-id", name,
            "--capacity", str(capacity),
            "--data-dir", str(self.root / name),
        ]  # fmt: skip
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(TESTS_DIR), os.environ.get("PYTHONPATH", "")]),
            "SCHEDD_EFFECTS_DB": str(self.effects_db),
            "SCHEDD_WORKER_NAME": name,
            "SCHEDD_LOG_LEVEL": os.environ.get("SCHEDD_CLUSTER_LOG", "info"),
        }
        proc = Proc(name, argv, env, self.root / "logs" / f"{name}.log")
        self.procs[name] = proc
        proc.start()
        return proc

    def restart(self, name: str) -> None:
        self.procs[name].start()

    # -- faults -----------------------------------------------------------------------

    def kill(self, name: str) -> None:
        proc = self.procs[name]
        proc.signal(signal.SIGKILL)
        proc.wait(10)

    def term(self, name: str, timeout: float = 20.0) -> int:
        proc = self.procs[name]
        proc.signal(signal.SIGTERM)
        return proc.wait(timeout)

    def pause(self, name: str) -> None:
        self.procs[name].signal(signal.SIGSTOP)

    def resume(self, name: str) -> None:
        self.procs[name].signal(signal.SIGCONT)

    def cut_from_etcd(self, name: str) -> None:
        for p in self.proxies[name]:
            p.cut()
        self.procs[name]._note("cut from etcd")

    def reconnect_to_etcd(self, name: str) -> None:
        for p in self.proxies[name]:
            p.restore()
        self.procs[name]._note("reconnected to etcd")

    # -- looking ----------------------------------------------------------------------

    def client(self, name: str) -> Client:
        client = Client(self.node_address(name))
        self._clients.append(client)
        return client

    def status(self, via: str) -> dict[str, Any]:
        out = subprocess.run(
            [*SCHEDCTL, "--endpoints", self.node_address(via), "cluster", "status", "-o", "json"],
            capture_output=True, text=True, timeout=20, check=False,
        )  # fmt: skip
        if out.returncode != 0:
            raise RuntimeError(out.stderr.strip())
        result: dict[str, Any] = json.loads(out.stdout)
        return result

    def wait_owned(
        self, nodes: list[str], timeout: float = 30.0, via: str | None = None
    ) -> dict[str, Any]:
        """Until every partition has an owner among ``nodes`` and each of them owns some."""

        def ok(status: dict[str, Any]) -> bool:
            owners = [p.get("owner", "") for p in status.get("partitions", [])]
            return (
                len(owners) == self.partitions
                and all(o in nodes for o in owners)
                and set(owners) == set(nodes)
            )

        ask = via or nodes[0]
        return wait_for(lambda: self.status(ask), ok, timeout=timeout, what=f"{nodes} to own all")

    def logs(self) -> str:
        return "\n".join(f"--- {n} ---\n{p.tail()}" for n, p in self.procs.items())

    def close(self) -> None:
        for client in self._clients:
            with contextlib.suppress(Exception):
                client.close()
        for proc in self.procs.values():
            if proc.alive:
                with contextlib.suppress(Exception):
                    proc.signal(signal.SIGCONT)
                    proc.signal(signal.SIGKILL)
                    proc.wait(10)
        for proxies in self.proxies.values():
            for p in proxies:
                p.close()


def stored_runs(endpoints: tuple[str, ...], prefix: str) -> list[tuple[str, int, Any]]:
    """The run records etcd holds under ``prefix``: (key, mod revision, Execution)."""
    import asyncio

    from schedd.store import EtcdConfig, connect_etcd, prefix_end
    from schedd.v1 import execution_pb2

    async def read() -> list[tuple[str, int, Any]]:
        kv = await connect_etcd(EtcdConfig(endpoints=endpoints))
        try:
            start = (prefix + "runs/").encode()
            kvs, _ = await kv.range_all(start, prefix_end(start))
            return [
                (kvp.key.decode(), kvp.mod_revision, execution_pb2.Execution.FromString(kvp.value))
                for kvp in kvs
            ]
        finally:
            await kv.close()

    return asyncio.run(read())


def dump_runs(endpoints: tuple[str, ...], prefix: str) -> str:
    """The run records etcd holds under ``prefix`` (for a failing test's report)."""
    return "\n".join(
        f"{key} rev={rev} state={ex.state} token={ex.fencing_token} attempt={ex.attempt} "
        f"worker={ex.worker_id}"
        for key, rev, ex in stored_runs(endpoints, prefix)
    )

"""Starts a real single-member etcd server as a child process (for `schedd dev` and tests)."""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

# Ports handed out from below the kernel's ephemeral range (32768-60999 on Linux), so an
# outgoing connection's source port or another ``bind(0)`` cannot take one between our check
# and the server's bind; and never the same one twice in this process.
_PORT_LOW, _PORT_HIGH = 20000, 32767
_handed_out: set[int] = set()
_rng = random.Random()


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free a moment ago on ``host`` and not handed out before here."""
    for _ in range(200):
        port = _rng.randint(_PORT_LOW, _PORT_HIGH)
        if port in _handed_out or not port_is_free(port, host):
            continue
        _handed_out.add(port)
        return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def port_is_free(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
        return True


class EtcdProcess:
    """One etcd member on loopback, data under ``data_dir``.

    >>> # with EtcdProcess(Path("/tmp/e")) as etcd: print(etcd.endpoint)
    """

    def __init__(
        self,
        data_dir: Path,
        *,
        client_port: int | None = None,
        peer_port: int | None = None,
        name: str = "schedd-dev",
        log_path: Path | None = None,
        extra_args: tuple[str, ...] = (),
        initial_cluster: str | None = None,
    ) -> None:
        self.data_dir = data_dir
        self.client_port = client_port or free_port()
        self.peer_port = peer_port or free_port()
        self.name = name
        self.log_path = log_path or data_dir / "etcd.log"
        self.extra_args = extra_args
        #: ``name=peer-url,...`` of every member; None: a cluster of this member alone.
        self.initial_cluster = initial_cluster
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.client_port}"

    @property
    def peer_url(self) -> str:
        return f"http://127.0.0.1:{self.peer_port}"

    def start(self, timeout_s: float = 20.0, *, wait: bool = True) -> EtcdProcess:
        """Starts the member; ``wait`` until it reports healthy (a member of a larger cluster
        is healthy only once a quorum runs: start them all first, then :meth:`wait_healthy`).
        A member started again on its data dir rejoins its cluster."""
        binary = shutil.which("etcd")
        if binary is None:
            raise RuntimeError("etcd is not on PATH (apt-get install etcd-server)")
        self.data_dir.mkdir(parents=True, exist_ok=True)
        client = f"http://127.0.0.1:{self.client_port}"
        peer = f"http://127.0.0.1:{self.peer_port}"
        args = [
            binary,
            "--name", self.name,
            "--data-dir", str(self.data_dir / "member"),
            "--listen-client-urls", client,
            "--advertise-client-urls", client,
            "--listen-peer-urls", peer,
            "--initial-advertise-peer-urls", peer,
            "--initial-cluster", self.initial_cluster or f"{self.name}={peer}",
            "--initial-cluster-state", "new",
            "--max-txn-ops", "4096",
            "--max-request-bytes", str(8 * 1024 * 1024),
            "--auto-compaction-mode", "revision",
            "--auto-compaction-retention", "100000",
            "--quota-backend-bytes", str(4 * 1024 * 1024 * 1024),
            "--log-level", "warn",
            "--logger", "zap",
            *self.extra_args,
        ]  # fmt: skip
        log = open(self.log_path, "ab")  # noqa: SIM115 - handed to the child
        env = dict(os.environ, ETCD_UNSUPPORTED_ARCH=os.environ.get("ETCD_UNSUPPORTED_ARCH", ""))
        self.proc = subprocess.Popen(
            args, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
        log.close()
        if wait:
            self.wait_healthy(timeout_s)
        return self

    def wait_healthy(self, timeout_s: float = 20.0) -> None:
        deadline = time.monotonic() + timeout_s
        url = f"http://127.0.0.1:{self.client_port}/health"
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                tail = self.log_path.read_text(errors="replace")[-2000:]
                raise RuntimeError(f"etcd exited with {self.proc.returncode}:\n{tail}")
            try:
                with urllib.request.urlopen(url, timeout=1) as resp:
                    if b'"true"' in resp.read():
                        return
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"etcd did not become healthy on {self.endpoint} in {timeout_s}s")

    def status(self) -> dict[str, Any] | None:
        """The member's maintenance status (member id, leader, revision); None if down."""
        if self.proc is None or self.proc.poll() is not None:
            return None
        req = urllib.request.Request(
            f"http://{self.endpoint}/v3/maintenance/status", data=b"{}", method="POST"
        )
        try:
            with urllib.request.urlopen(req, timeout=2) as resp:
                return dict(json.loads(resp.read()))
        except (urllib.error.URLError, OSError, ValueError):
            return None

    def stop(self, sig: int = signal.SIGTERM, timeout_s: float = 10.0) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(sig)
        try:
            self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def kill(self) -> None:
        self.stop(signal.SIGKILL)

    def __enter__(self) -> EtcdProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class EtcdCluster:
    """Several etcd members on loopback forming one cluster (3 or 5 in production shape).

    Members are real processes: :meth:`kill` sends SIGKILL, :meth:`restart` starts one again
    on its data dir, so it rejoins. :meth:`leader` asks the members which one leads.
    """

    def __init__(self, root: Path, size: int = 3, *, name: str = "schedd-etcd") -> None:
        ports = [(free_port(), free_port()) for _ in range(size)]
        peers = ",".join(f"{name}{i}=http://127.0.0.1:{pp}" for i, (_, pp) in enumerate(ports))
        self.members = [
            EtcdProcess(
                root / f"member{i}",
                client_port=cp,
                peer_port=pp,
                name=f"{name}{i}",
                initial_cluster=peers,
            )
            for i, (cp, pp) in enumerate(ports)
        ]

    @property
    def endpoints(self) -> tuple[str, ...]:
        return tuple(m.endpoint for m in self.members)

    def start(self, timeout_s: float = 30.0) -> EtcdCluster:
        for m in self.members:
            m.start(wait=False)
        for m in self.members:
            m.wait_healthy(timeout_s)
        return self

    def leader(self) -> int:
        """Index of the member that leads the raft group now, as the live members report."""
        ids: dict[int, int] = {}
        leaders: set[int] = set()
        for i, m in enumerate(self.members):
            status = m.status()
            if status:
                ids[int(status["header"]["member_id"])] = i
                leaders.add(int(status.get("leader", 0)))
        for leader in leaders:
            if leader in ids:
                return ids[leader]
        raise RuntimeError("no live etcd member reports a leader")

    def kill(self, index: int) -> None:
        self.members[index].kill()

    def restart(self, index: int, timeout_s: float = 30.0) -> None:
        self.members[index].start(timeout_s)

    def stop(self) -> None:
        for m in self.members:
            m.stop()

    def __enter__(self) -> EtcdCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

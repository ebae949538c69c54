"""Starts a real single-member etcd server as a child process (for `schedd dev` and tests)."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free a moment ago on ``host``."""
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
    ) -> None:
        self.data_dir = data_dir
        self.client_port = client_port or free_port()
        self.peer_port = peer_port or free_port()
        self.name = name
        self.log_path = log_path or data_dir / "etcd.log"
        self.extra_args = extra_args
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.client_port}"

    def start(self, timeout_s: float = 20.0) -> EtcdProcess:
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
            "--initial-cluster", f"{self.name}={peer}",
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
        self._wait_healthy(timeout_s)
        return self

    def _wait_healthy(self, timeout_s: float) -> None:
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

"""The outbox tests' real parts: a ``schedd node`` process on an embedded store, a private
PostgreSQL server (``initdb`` into a temporary directory, like the tests' etcd), and SQLite
files. PostgreSQL tests are skipped when its binaries are missing, except in CI (``CI=true``),
where ``make test`` installed Debian's ``postgresql`` package and they must run."""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from schedd.client import Client
from schedd.dev import free_port

SCHEDD = [sys.executable, "-m", "schedd.cli.schedd_main"]


class NodeProcess:
    """A real ``schedd node`` on an embedded store in ``root``; kill and start it again on the
    same store and port."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.endpoint = f"127.0.0.1:{free_port()}"
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = root / "node.log"

    def start(self) -> None:
        argv = [*SCHEDD, "node", "--store", f"rocksdb:{self.root / 'store'}",
                "--data-dir", str(self.root / "data"), "--listen", self.endpoint,
                "--partitions", "4"]  # fmt: skip
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
        self.wait_serving()

    def wait_serving(self, timeout_s: float = 30) -> None:
        deadline = time.monotonic() + timeout_s
        with Client(self.endpoint, timeout_s=2) as client:
            while True:
                assert self.proc is not None and self.proc.poll() is None, self.log.read_text()
                try:
                    st = client.cluster_status(local_only=True)
                    if st.partitions and all(p.owner for p in st.partitions):
                        return
                except Exception:
                    if time.monotonic() > deadline:
                        raise
                time.sleep(0.1)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.kill()


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    """One node for a test module (tests keep apart by the names of their jobs)."""
    n = NodeProcess(tmp_path_factory.mktemp("node"))
    n.start()
    yield n
    n.stop()


@pytest.fixture
def own_node(tmp_path: Path) -> Iterator[NodeProcess]:
    """A node of the test's own, for tests that kill it."""
    n = NodeProcess(tmp_path / "node")
    n.root.mkdir()
    n.start()
    yield n
    n.stop()


def _pg_bin() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/postgres"), key=_version)
    if found:
        return Path(found[-1]).parent
    on_path = shutil.which("postgres")
    return Path(on_path).resolve().parent if on_path else None


def _version(path: str) -> int:
    part = Path(path).parts[-3]
    return int(part) if part.isdigit() else 0


class PostgresServer:
    """A private PostgreSQL server on a free loopback port, data in a temporary directory
    (run as the ``postgres`` OS user when the tests run as root: postgres refuses root)."""

    def __init__(self, bindir: Path) -> None:
        self.bindir = bindir
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="schedd-pg-"))
        self.proc: subprocess.Popen[bytes] | None = None
        self._as: list[str] = []
        if os.geteuid() == 0:
            # setpriv execs (runuser would stay in between and not pass our signals on).
            self._as = ["setpriv", "--reuid=postgres", "--regid=postgres", "--init-groups"]
            shutil.chown(self.dir, "postgres", "postgres")

    def start(self) -> None:
        data, sock = self.dir / "data", self.dir
        subprocess.run(
            [*self._as, str(self.bindir / "initdb"), "-D", str(data), "-U", "postgres",
             "-A", "trust", "--no-sync", "-E", "UTF8"],
            check=True, capture_output=True, timeout=120,
        )  # fmt: skip
        log = open(self.dir / "server.log", "ab")  # noqa: SIM115 (the server's, closed by it)
        self.proc = subprocess.Popen(
            [*self._as, str(self.bindir / "postgres"), "-D", str(data), "-p", str(self.port),
             "-k", str(sock), "-c", "listen_addresses=127.0.0.1", "-c", "fsync=off",
             "-c", "max_connections=100"],
            stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        log.close()
        deadline = time.monotonic() + 30
        while True:
            try:
                psycopg.connect(self.conninfo("postgres"), connect_timeout=2).close()
                return
            except psycopg.OperationalError:
                assert self.proc.poll() is None, (self.dir / "server.log").read_text()
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)

    def conninfo(self, db: str) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{db}"

    def new_database(self) -> str:
        """A fresh database; its SQLAlchemy URL."""
        name = f"t_{uuid.uuid4().hex[:10]}"
        with psycopg.connect(self.conninfo("postgres"), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')  # a generated name, nothing to quote
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{name}"

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)  # fast shutdown
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture(scope="session")
def postgres() -> Iterator[PostgresServer]:
    bindir = _pg_bin()
    if bindir is None:
        if os.environ.get("CI") == "true":
            pytest.fail("PostgreSQL is missing: `make test` installs Debian's postgresql package")
        pytest.skip("PostgreSQL not installed (Debian package postgresql)")
    server = PostgresServer(bindir)
    try:
        server.start()
        yield server
    finally:
        server.stop()


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh, empty database: a SQLite file, or a database on the private server."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'app.db'}"
    server: PostgresServer = request.getfixturevalue("postgres")
    return server.new_database()


@contextlib.contextmanager
def relay_process(db: str, node: str, *args: str, env: dict[str, str] | None = None,
                  log: Path) -> Iterator[subprocess.Popen[bytes]]:  # fmt: skip
    """``schedd outbox relay`` as a process, killed on the way out."""
    argv = [*SCHEDD, "outbox", "relay", "--db", db, "--node", node, *args]
    with open(log, "ab") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT,
                                env={**os.environ, **(env or {})})  # fmt: skip
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            proc.wait(10)


@pytest.fixture
def relay_proc() -> object:
    """:func:`relay_process`, for tests (conftest helpers reach tests as fixtures)."""
    return relay_process

"""The effect ledger the cluster tests check: a fenced sink shared by every worker process.

Handlers (:mod:`cluster.effect_handlers`, loaded into real ``schedd worker`` processes) write
each attempt's start and its effect here; the test reads it afterwards. It is one SQLite
file in WAL mode, so several processes write it safely, each write its own transaction.

* ``attempts``: one row per handler start (execution, job, scheduled time, token, worker,
  wall-clock start), whatever became of it.
* ``effects``: the effect of one fire, keyed by (job, scheduled time). A write carries the
  attempt's fencing token and is refused when a larger token already wrote the key: the
  classic fenced sink, so a zombie attempt that resumes late cannot overwrite its successor.
  Accepted and refused writes are both kept in ``writes`` for the checks.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

_SCHEMA = """
CREATE TABLE IF NOT EXISTS attempts (
    execution_id TEXT NOT NULL, job_id TEXT NOT NULL, scheduled_ms INTEGER NOT NULL,
    token INTEGER NOT NULL, worker TEXT NOT NULL, started_ms INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS effects (
    job_id TEXT NOT NULL, scheduled_ms INTEGER NOT NULL, token INTEGER NOT NULL,
    worker TEXT NOT NULL, PRIMARY KEY (job_id, scheduled_ms)
);
CREATE TABLE IF NOT EXISTS writes (
    job_id TEXT NOT NULL, scheduled_ms INTEGER NOT NULL, token INTEGER NOT NULL,
    worker TEXT NOT NULL, accepted INTEGER NOT NULL, at_ms INTEGER NOT NULL
);
"""


@dataclass(frozen=True)
class Attempt:
    execution_id: str
    job_id: str
    scheduled_ms: int
    token: int
    worker: str
    started_ms: int


@dataclass(frozen=True)
class Write:
    job_id: str
    scheduled_ms: int
    token: int
    worker: str
    accepted: bool
    at_ms: int


class EffectLedger:
    """Opens (and creates) the ledger at ``path``; one instance per process and thread."""

    def __init__(self, path: str | Path) -> None:
        # Handlers call from worker threads (asyncio.to_thread): one connection, one lock.
        self._lock = threading.Lock()
        self._db = sqlite3.connect(
            str(path), timeout=30.0, isolation_level=None, check_same_thread=False
        )
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.executescript(_SCHEMA)

    def close(self) -> None:
        self._db.close()

    @contextmanager
    def _txn(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    def started(
        self,
        execution_id: str,
        job_id: str,
        scheduled_ms: int,
        token: int,
        worker: str,
        started_ms: int = 0,
    ) -> None:
        """An attempt began; ``started_ms`` is when the worker started it (a process frozen
        between that and this call records it late: ordering uses the worker's instant)."""
        with self._txn() as db:
            db.execute(
                "INSERT INTO attempts VALUES (?, ?, ?, ?, ?, ?)",
                (execution_id, job_id, scheduled_ms, token, worker, started_ms or _now_ms()),
            )

    def put(self, job_id: str, scheduled_ms: int, token: int, worker: str) -> bool:
        """The fenced write: True if accepted (no larger token wrote the key before)."""
        with self._txn() as db:
            row = db.execute(
                "SELECT token FROM effects WHERE job_id = ? AND scheduled_ms = ?",
                (job_id, scheduled_ms),
            ).fetchone()
            accepted = row is None or row[0] <= token
            if accepted:
                db.execute(
                    "INSERT OR REPLACE INTO effects VALUES (?, ?, ?, ?)",
                    (job_id, scheduled_ms, token, worker),
                )
            db.execute(
                "INSERT INTO writes VALUES (?, ?, ?, ?, ?, ?)",
                (job_id, scheduled_ms, token, worker, int(accepted), _now_ms()),
            )
        return accepted

    def attempts(self) -> list[Attempt]:
        with self._lock:
            rows = self._db.execute("SELECT * FROM attempts ORDER BY started_ms").fetchall()
        return [Attempt(*r) for r in rows]

    def writes(self) -> list[Write]:
        with self._lock:
            rows = self._db.execute("SELECT * FROM writes ORDER BY at_ms").fetchall()
        return [Write(r[0], r[1], r[2], r[3], bool(r[4]), r[5]) for r in rows]


def _now_ms() -> int:
    return time.time_ns() // 1_000_000

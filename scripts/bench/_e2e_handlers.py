"""The benchmark's worker-side module: a no-op handler that records when each execution started.

Loaded by ``schedd worker --import _e2e_handlers`` (``scripts/bench`` on PYTHONPATH). The handler
appends ``(execution_id, due_ms, time.time_ns())`` to an in-memory list; a daemon thread
moves the list to ``$E2E_RECORD`` as text lines ``ID DUE_MS START_NS`` once 100 ms pass with no
new record (or 2 s after its last write while records keep coming), and an atexit hook writes
what is left. Formatting the lines holds the GIL (~1 us a record), so it waits until a burst of
starts is over instead of competing with it; APScheduler's side keeps its starts in a list.
The handler itself never touches the file, so recording costs one list append on the hot path,
and the file is complete a moment after the last start even if the worker process is killed
later (the benchmark reads it while the worker runs).
"""

from __future__ import annotations

import atexit
import collections
import os
import threading
import time
from typing import Any

from schedd.schedule import jitter_offset_ms

_FLUSH_INTERVAL_S = 0.1
_MAX_DEFER_S = 2.0


class StartRecorder:
    """Collects start records in memory; a background thread appends them to a file."""

    def __init__(self, path: str) -> None:
        self.path = path
        # deque: append (event loop thread) and popleft (flusher) are atomic, so none is lost.
        self._pending: collections.deque[tuple[str, int, int]] = collections.deque()
        self._lock = threading.Lock()  # serialises flushes (thread vs atexit), not appends
        self._stop = threading.Event()
        open(path, "a").close()
        self._thread = threading.Thread(target=self._run, name="e2e-recorder", daemon=True)
        self._thread.start()
        atexit.register(self.close)

    def record(self, execution_id: str, scheduled_ms: int) -> None:
        self._pending.append((execution_id, scheduled_ms, time.time_ns()))

    def flush(self) -> None:
        with self._lock:
            pending = self._pending
            batch = [pending.popleft() for _ in range(len(pending))]
            if not batch:
                return
            text = "".join(f"{eid} {ms} {ns}\n" for eid, ms, ns in batch)
            with open(self.path, "a") as f:
                f.write(text)

    def _run(self) -> None:
        seen = 0
        last = time.monotonic()
        while not self._stop.wait(_FLUSH_INTERVAL_S):
            n = len(self._pending)
            if n > seen and time.monotonic() - last < _MAX_DEFER_S:
                seen = n  # still arriving: write once they stop
                continue
            self.flush()
            seen = 0
            last = time.monotonic()

    def close(self) -> None:
        self._stop.set()
        self.flush()


#: The jitter the benchmark's jobs were created with (``E2E_JITTER_MS``): each execution is due
#: at its scheduled fire plus the job's deterministic offset, and lateness counts from there.
_JITTER_MS = int(os.environ.get("E2E_JITTER_MS", "0"))


def _due_ms(ctx: Any) -> int:
    """The instant the scheduler aimed at: the scheduled fire plus the job's jitter offset."""
    # The execution id is "{job_id}@{scheduled_ms}" (see schedd.model.execution_id).
    job_id, _, sched = str(ctx.execution_id).rpartition("@")
    ms = int(getattr(ctx, "scheduled_ms", 0) or sched)
    return ms + jitter_offset_ms(job_id, ms, _JITTER_MS) if _JITTER_MS else ms


def register(worker: Any) -> None:
    """Registers the ``noop`` handler on ``worker``, recording into ``$E2E_RECORD``."""
    recorder = StartRecorder(os.environ.get("E2E_RECORD", "e2e-starts.txt"))

    @worker.handler("noop")
    async def noop(ctx: Any, payload: Any) -> None:
        recorder.record(ctx.execution_id, _due_ms(ctx))

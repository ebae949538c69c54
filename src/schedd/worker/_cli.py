"""Glue for ``schedd worker``: build a Worker from flags, import handler modules, run."""

from __future__ import annotations

import importlib
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from schedd._errors import SchedError
from schedd._tls import TlsFiles
from schedd.worker._config import WorkerConfig
from schedd.worker._http import HttpConfig, HttpExecutor
from schedd.worker._worker import Worker

if TYPE_CHECKING:
    from schedd.worker._shell import ShellConfig

log = logging.getLogger(__name__)


def parse_connect(connect: str | Sequence[str]) -> list[str]:
    """``--connect`` values (repeatable, each comma-separated) as one list, duplicates dropped:
    ``["a:1,b:2", "b:2", "c:3"]`` -> ``["a:1", "b:2", "c:3"]``."""
    items = [connect] if isinstance(connect, str) else list(connect)
    return list(dict.fromkeys(e.strip() for i in items for e in i.split(",") if e.strip()))


def run_worker_from_cli(
    connect: str | Sequence[str],
    queues: list[str],
    imports: list[str],
    worker_id: str | None,
    capacity: int,
    data_dir: str | None,
    prefetch: int = 10_000,
    discover: bool = True,
    http: HttpConfig | None = None,
    shell: ShellConfig | None = None,
    metrics_listen: str = "",
    token: str | None = None,
    tls: TlsFiles | None = None,
    shutdown_timeout_s: float = 30.0,
) -> int:
    """Run a worker until SIGINT/SIGTERM (then stop gracefully).

    Args:
        connect: Node addresses, each item comma-separated (``host:port,host:port``).
        queues: Queues to consume (empty: ``default``).
        imports: Modules to import, each with ``def register(worker: Worker) -> None``.
        worker_id: Stable id (None: kept in ``data_dir/worker_id``).
        capacity: Executions run at once.
        data_dir: Ledger and checkpoints (None: a temporary directory).
        prefetch: Executions held ahead of their instant (0: none).
        discover: Connect to every live node the given ones name, not only to them.
        http: Run HTTP jobs with this configuration (None: this worker does not run them).
        shell: Run shell jobs with this configuration (None: refused, never announced).
        metrics_listen: Serve Prometheus metrics at ``http://HOST:PORT/metrics`` ("": off;
            HTTPS when ``tls`` has a certificate).
        token: The worker token streams open with (clusters with auth on).
        tls: TLS to the nodes (None: plaintext).
        shutdown_timeout_s: On SIGTERM, how long running executions may finish.

    Returns:
        0 after a clean stop, 2 for bad arguments or a module that cannot be registered.
    """
    try:
        config = WorkerConfig(
            endpoints=tuple(parse_connect(connect)),
            queues=tuple(queues or ["default"]),
            worker_id=worker_id,
            capacity=capacity,
            prefetch=prefetch,
            data_dir=Path(data_dir) if data_dir is not None else None,
            discover=discover,
            metrics_listen=metrics_listen,
            token=token or None,
            tls=tls,
            shutdown_timeout_s=shutdown_timeout_s,
        )
        worker = Worker(config)
        _name_in_logs(worker)
        _register_modules(worker, imports)
        _add_kinds(worker, http, shell)
    except (ImportError, ValueError) as e:
        log.error("cannot start worker: %s", e)
        return 2
    return _run(worker)


def _name_in_logs(worker: Worker) -> None:
    """Every line this process logs names the worker (its id is known once it started)."""
    # Imported here, not at the top: schedd.worker exports run_worker_from_cli, and the log
    # setup (structlog, which loads rich) is for the daemon, not for programs using the SDK.
    from schedd._logfmt import bind_process

    bind_process(worker=lambda: worker.worker_id)


def _register_modules(worker: Worker, imports: list[str]) -> None:
    """Imports each module and calls its ``register(worker)``.

    Raises:
        ImportError: A module that cannot be imported.
        ValueError: A module without a ``register`` function.
    """
    for name in imports:
        module = importlib.import_module(name)
        register = getattr(module, "register", None)
        if not callable(register):
            raise ValueError(f"module {name!r} has no register(worker) function")
        register(worker)


def _add_kinds(worker: Worker, http: HttpConfig | None, shell: ShellConfig | None) -> None:
    """Adds the executors of the job kinds that are on (http, shell)."""
    if http is not None:
        worker.add_executor("http", HttpExecutor(http))
    if shell is not None:
        from schedd.worker._shell import ShellExecutor

        worker.add_executor("shell", ShellExecutor(shell))


def _run(worker: Worker) -> int:
    """Says what the worker will run (warns when that is nothing), then runs it until
    SIGINT/SIGTERM: 0 after a clean stop, 1 when it cannot run."""
    hello = worker.hello()
    kinds = [k for k, on in (("http", hello.accepts_http), ("shell", hello.accepts_shell)) if on]
    if not worker.handler_names and not kinds:
        log.warning("no handlers registered and HTTP jobs off: this worker will run nothing")
    log.info(
        "worker runs %d handlers%s",
        len(worker.handler_names),
        f" and {' and '.join(kinds)} jobs" if kinds else "",
    )
    try:
        worker.run_sync()
    except SchedError as e:  # e.g. the data dir is held by a worker still running
        log.error("cannot run worker: %s", e)
        return 1
    return 0

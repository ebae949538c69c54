"""Typed configuration of a worker (flags and env are read only at the edge, ``schedd worker``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from schedd._tls import TlsConfigError, TlsFiles
from schedd.worker._ledger import DEFAULT_TTL_S


@dataclass(frozen=True)
class WorkerConfig:
    """Everything a :class:`~schedd.worker.Worker` needs; validated when it is made.

    Sequences given as lists are kept as tuples and ``data_dir`` as a Path, so a config is
    immutable and hashable whatever it was built from.

    Attributes:
        endpoints: Node addresses (``host:port``); the worker keeps a stream open to each
            (every node dispatches its own partitions), and with ``discover`` to every other
            live node they name. At least one.
        queues: Queues whose executions this worker takes. At least one.
        worker_id: Stable id the nodes know this worker by (None: kept in
            ``data_dir/worker_id``, made on first use).
        capacity: Most executions running at once across all streams (dispatch credits).
        prefetch: Most executions a node may send ahead of their instant, held here and
            started by the worker's own timer (0: none; then ``capacity`` is a strict bound).
        data_dir: The ledger and ``worker_id`` live here (None: a temporary directory that is
            deleted at exit, so the ledger does not survive a restart).
        heartbeat_interval_s: How often running attempts heartbeat (None: the shortest
            interval a connected node asked for in its Welcome, else 2 s).
        shutdown_timeout_s: A graceful stop lets running attempts finish for this long before
            it cancels them (the default of ``Worker.stop(timeout=...)``).
        cancel_timeout_s: After cancelling, a stop waits this long for the cancelled attempts
            to report before it closes the streams anyway.
        stream_close_timeout_s: Closing a stream waits this long for its buffered messages to
            be written and the node to end its side; then the stream is cut.
        reconnect_min_s: The first reconnect delay after a stream fails (full jitter, doubled
            per failed attempt in a row).
        reconnect_max_s: The longest reconnect delay.
        thread_pool_size: Threads running sync (``def``) handlers.
        ledger_ttl_s: Ledger entries older than this are pruned at start.
        discover: Ask the nodes for the live members every ``discovery_interval_s`` and
            connect to each (nodes that join later too); False: only ``endpoints``.
        discovery_interval_s: Time between membership queries (also one query's deadline).
        forget_node_after_s: A connection to an address out of the membership this long is
            closed, once it carries no running execution.
        metrics_listen: ``host:port`` of a Prometheus ``/metrics`` endpoint ("": none).
            Served over HTTPS with ``tls``'s certificate when it has one.
        tls: TLS to the nodes (None: plaintext), e.g. a :class:`schedd.client.ClientTls`: the
            nodes' certificates are verified against its CA (None: the system's), and its
            certificate, if any, is this worker's client certificate (nodes started with a
            CA require one). Its files are read once, when the worker is made.
    """

    endpoints: tuple[str, ...]
    queues: tuple[str, ...] = ("default",)
    worker_id: str | None = None
    capacity: int = 16
    prefetch: int = 10_000
    data_dir: Path | None = None
    heartbeat_interval_s: float | None = None
    shutdown_timeout_s: float = 30.0
    cancel_timeout_s: float = 10.0
    stream_close_timeout_s: float = 5.0
    reconnect_min_s: float = 0.1
    reconnect_max_s: float = 5.0
    thread_pool_size: int = 8
    ledger_ttl_s: float = DEFAULT_TTL_S
    discover: bool = True
    discovery_interval_s: float = 2.0
    forget_node_after_s: float = 30.0
    metrics_listen: str = ""
    token: str | None = field(default=None, repr=False)
    tls: TlsFiles | None = None

    def __post_init__(self) -> None:
        # Callers (and the keyword convenience of Worker) may pass a str, lists or a str path.
        endpoints = (self.endpoints,) if isinstance(self.endpoints, str) else self.endpoints
        object.__setattr__(self, "endpoints", tuple(endpoints))
        object.__setattr__(self, "queues", tuple(self.queues))
        if self.data_dir is not None:
            object.__setattr__(self, "data_dir", Path(self.data_dir))
        if not self.endpoints:
            raise ValueError("endpoints: give at least one node address")
        if not self.queues:
            raise ValueError("queues: give at least one queue")
        if self.metrics_listen and not self.metrics_listen.rpartition(":")[2].isdigit():
            raise ValueError(f"metrics_listen: give HOST:PORT, got {self.metrics_listen!r}")
        if self.token is not None and (
            not self.token.strip() or any(c.isspace() for c in self.token.strip())
        ):
            raise ValueError("token: one API token (sdt_...), without spaces")
        if self.capacity <= 0:
            raise ValueError(f"capacity: must be positive, got {self.capacity}")
        if self.prefetch < 0:
            raise ValueError(f"prefetch: must not be negative, got {self.prefetch}")
        if self.thread_pool_size <= 0:
            raise ValueError(f"thread_pool_size: must be positive, got {self.thread_pool_size}")
        if self.discovery_interval_s <= 0:
            raise ValueError(
                f"discovery_interval_s: must be positive, got {self.discovery_interval_s}"
            )
        if self.forget_node_after_s < 0:
            raise ValueError(
                f"forget_node_after_s: must not be negative, got {self.forget_node_after_s}"
            )
        if not 0 < self.reconnect_min_s <= self.reconnect_max_s:
            raise ValueError(
                "reconnect_min_s and reconnect_max_s: need 0 < min <= max, got "
                f"{self.reconnect_min_s} and {self.reconnect_max_s}"
            )


def check_tls_files(config: WorkerConfig) -> None:
    """Reads the TLS files of ``config`` now, so a bad one fails when the worker is made, not
    at each connect.

    Raises:
        ValueError: A file that cannot be used, named by its field
            (``tls.cert_file: cannot read ...``).
    """
    if config.tls is None:
        return
    try:
        _ = config.tls.material
    except TlsConfigError as exc:
        names = {f: f"tls.{f}" for f in ("cert_file", "key_file", "ca_file")}
        raise ValueError(exc.message(names)) from exc

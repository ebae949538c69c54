"""`schedd`: run a scheduler node, a worker, or a whole local cluster (`schedd dev`)."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from schedd._errors import SchedError
from schedd._gc import tune_gc
from schedd._limits import GRPC_MAX_MESSAGE_BYTES, GRPC_MIN_MESSAGE_BYTES
from schedd._logfmt import LOG_FORMATS, bind_process, configure_logging, json_logs
from schedd._tls import TlsConfigError, TlsFiles
from schedd.cli._bootstrap import token_group
from schedd.cli._keys import encryption_keys_option, keys, load_keyring
from schedd.cli._kinds import job_kind_configs, job_kind_options
from schedd.cli._store_flags import store_options

if TYPE_CHECKING:
    from schedd.store import StoreConfig

#: TlsFiles' settings as the flags of ``schedd node`` and ``schedd worker`` name them.
TLS_FLAGS = {
    "cert_file": "--tls-cert-file",
    "key_file": "--tls-key-file",
    "ca_file": "--tls-ca-file",
    "server_name": "--tls-server-name",
}
#: Each TLS flag's help, for a node and for a worker.
_TLS_HELP = {
    "node": {
        "cert_file": "serve gRPC over TLS with this certificate (PEM, with --tls-key-file); the"
        " dashboard and metrics then serve HTTPS with it, asking no client certificate",
        "key_file": "the private key of --tls-cert-file (PEM, not encrypted)",
        "ca_file": "require client certificates signed by this CA (PEM): workers, schedctl and"
        " peers (mutual TLS); peers' certificates are verified against it too",
        "server_name": "name the peers' certificates are verified against, when they do not"
        " hold the host each peer advertises",
    },
    "worker": {
        "cert_file": "client certificate for nodes that require one (PEM, with"
        " --tls-key-file); --metrics-listen then serves HTTPS with it",
        "key_file": "the private key of --tls-cert-file (PEM, not encrypted)",
        "ca_file": "connect over TLS, verifying the nodes' certificates against this CA (PEM;"
        " without it but with another --tls-* flag: the system's CAs)",
        "server_name": "name the nodes' certificates must hold (default: the host dialled)",
    },
}

log = logging.getLogger("schedd.cli")


@click.group()
@click.option(
    "--log-level", default=lambda: os.environ.get("SCHEDD_LOG_LEVEL", "info"), show_default="info"
)
@click.option(
    "--log-format",
    envvar="SCHEDD_LOG_FORMAT",
    type=click.Choice(LOG_FORMATS, case_sensitive=False),
    default="text",
    show_default=True,
    help="text: one readable line per event; json: one JSON object per line, with the node,"
    " worker, partition, job, execution and token as fields",
)
def main(log_level: str, log_format: str) -> None:
    """schedd: a distributed job scheduler."""
    # The libraries' loggers (gRPC, asyncio, the etcd client) stay at INFO or above, so
    # ``debug`` shows what schedd decided without their chatter.
    configure_logging(log_level, log_format.lower())


def _say(message: str, *args: object, node: str | None = None, error: bool = False) -> None:
    """A line of the CLI's own on stderr: as it always read in text logs, a log record (and
    so a JSON object) in JSON logs."""
    if json_logs():
        extra = {"node": node} if node else None
        log.log(logging.ERROR if error else logging.INFO, message, *args, extra=extra)
    else:
        click.echo(message % args if args else message, err=True)


F = TypeVar("F", bound=Callable[..., Any])


def _check_listen(ctx: click.Context, param: click.Parameter, value: str) -> str:
    port = value.rpartition(":")[2]
    if value and (not port.isdigit() or not 0 <= int(port) <= 65535):
        raise click.BadParameter(f"give HOST:PORT, got {value!r}")
    return value


#: The help's note on HTTPS, for commands that take --tls-cert-file.
_HTTPS_NOTE = ", or https:// with --tls-cert-file (no client certificate asked)"


def metrics_option(func: F | None = None, *, default: str = "", https: bool = True) -> Any:
    """``--metrics-listen HOST:PORT``: serve Prometheus metrics at /metrics ("": off);
    ``https``: the command serves it over HTTPS with its --tls-cert-file (said in the help)."""

    def wrap(f: F) -> F:
        return click.option(
            "--metrics-listen",
            envvar="SCHEDD_METRICS_LISTEN",
            default=default,
            show_default=bool(default),
            callback=_check_listen,
            help="serve Prometheus metrics at http://HOST:PORT/metrics"
            + (_HTTPS_NOTE if https else "")
            + (" ('' turns it off)" if default else " (default: off)"),
        )(f)

    return wrap(func) if func is not None else wrap


def http_options(func: F | None = None, *, default: str = "", https: bool = True) -> Any:
    """``--http-listen HOST:PORT`` (the web dashboard; "": off) and ``--http-actions``."""

    def wrap(f: F) -> F:
        f = click.option(
            "--http-actions/--no-http-actions",
            envvar="SCHEDD_HTTP_ACTIONS",
            default=False,
            show_default=True,
            help="let the dashboard pause, resume, trigger and redrive (each confirmed, with a"
            " CSRF token); off: read-only",
        )(f)
        return click.option(
            "--http-listen",
            envvar="SCHEDD_HTTP_LISTEN",
            default=default,
            show_default=bool(default),
            callback=_check_listen,
            help="serve the web dashboard at http://HOST:PORT/"
            + (_HTTPS_NOTE if https else "")
            + (" ('' turns it off)" if default else " (default: off)"),
        )(f)

    return wrap(func) if func is not None else wrap


def tls_options(role: str) -> Callable[[F], F]:
    """``--tls-cert-file``, ``--tls-key-file``, ``--tls-ca-file``, ``--tls-server-name``
    (env ``SCHEDD_TLS_CERT_FILE``...), with the help of ``role`` (node or worker)."""

    def wrap(f: F) -> F:
        for field, flag in reversed(TLS_FLAGS.items()):
            kind = None if field == "server_name" else click.Path(dir_okay=False)
            f = click.option(
                flag,
                "tls_" + field,
                envvar="SCHEDD_" + flag.removeprefix("--").replace("-", "_").upper(),
                default=None,
                type=kind,
                help=_TLS_HELP[role][field],
            )(f)
        return f

    return wrap


def tls_files(
    cert_file: str | None,
    key_file: str | None,
    ca_file: str | None,
    server_name: str | None,
    *,
    server: bool,
) -> TlsFiles | None:
    """The TLS flags as TlsFiles, their files read now (None: no TLS flag given).

    Raises:
        click.BadParameter: A flag that cannot be used, named (a node needs a certificate).
    """
    if not (cert_file or key_file or ca_file or server_name):
        return None
    try:
        tls = TlsFiles(
            cert_file=cert_file, key_file=key_file, ca_file=ca_file, server_name=server_name
        )
        if server:
            tls.check_server()
        else:
            _ = tls.material
    except TlsConfigError as exc:
        raise click.BadParameter(exc.reason(TLS_FLAGS), param_hint=TLS_FLAGS[exc.field]) from exc
    return tls


@main.command()
@store_options
@click.option("--listen", envvar="SCHEDD_LISTEN", default="127.0.0.1:7070", show_default=True)
@click.option(
    "--advertise", envvar="SCHEDD_ADVERTISE", default="", help="address peers and workers use"
)
@click.option("--node-id", envvar="SCHEDD_NODE_ID", default=None, help="default: hostname-port")
@click.option(
    "--data-dir", envvar="SCHEDD_DATA_DIR", default=None, type=click.Path(file_okay=False)
)
@click.option(
    "--partitions",
    envvar="SCHEDD_PARTITIONS",
    default=64,
    show_default=True,
    type=click.IntRange(1, 4096),
)
@click.option(
    "--session-ttl",
    envvar="SCHEDD_SESSION_TTL_S",
    default=5,
    show_default=True,
    type=click.IntRange(2, 300),
    help="node lease TTL in seconds",
)
@click.option(
    "--max-clock-skew-ms",
    envvar="SCHEDD_MAX_CLOCK_SKEW_MS",
    default=500,
    show_default=True,
    type=click.IntRange(1, 600_000),
)
@click.option(
    "--lease-timeout-ms",
    envvar="SCHEDD_LEASE_TIMEOUT_MS",
    default=15_000,
    show_default=True,
    type=click.IntRange(500, 86_400_000),
    help="a dispatched execution not heartbeated this long is redelivered",
)
@click.option(
    "--heartbeat-interval-ms",
    envvar="SCHEDD_HEARTBEAT_INTERVAL_MS",
    default=3_000,
    show_default=True,
    type=click.IntRange(100, 3_600_000),
    help="how often workers are told to heartbeat running executions",
)
@click.option(
    "--max-write-txns",
    envvar="SCHEDD_MAX_WRITE_TXNS",
    default=4,
    show_default=True,
    type=click.IntRange(0, 1024),
    help="fenced write transactions the node has in flight to etcd at once (0: no bound)",
)
@click.option(
    "--max-dispatch-backlog",
    envvar="SCHEDD_MAX_DISPATCH_BACKLOG",
    default=20_000,
    show_default=True,
    type=click.IntRange(0, 10_000_000),
    help="claimed executions waiting for a worker past which the node claims nothing (0: no bound)",
)
@click.option(
    "--history-ttl-s",
    envvar="SCHEDD_HISTORY_TTL_S",
    default=7 * 86_400,
    show_default=True,
    type=click.IntRange(1, 10 * 365 * 86_400),
    help="how long finished executions stay in the node's run history",
)
@click.option(
    "--history-prune-interval-s",
    envvar="SCHEDD_HISTORY_PRUNE_INTERVAL_S",
    default=60.0,
    show_default=True,
    type=click.FloatRange(min=0),
    help="how often history older than --history-ttl-s is deleted (0: only at start)",
)
@click.option(
    "--compaction-interval-s",
    envvar="SCHEDD_COMPACTION_INTERVAL_S",
    default=60.0,
    show_default=True,
    type=click.FloatRange(min=0),
    help="how often the store's history is compacted (0: never; etcd's own compaction then)",
)
@click.option(
    "--compaction-keep-revisions",
    envvar="SCHEDD_COMPACTION_KEEP_REVISIONS",
    default=50_000,
    show_default=True,
    type=click.IntRange(min=100),
    help="revisions of history compaction keeps (for watches and reads in flight)",
)
@click.option(
    "--peer-timeout-ms",
    envvar="SCHEDD_PEER_TIMEOUT_MS",
    default=2_000,
    show_default=True,
    type=click.IntRange(50, 60_000),
    help="how long cluster-wide views (run list/get, cluster status) wait for each peer",
)
@click.option(
    "--auth/--no-auth",
    envvar="SCHEDD_AUTH",
    default=False,
    help="require an API token on every call, worker stream and dashboard page (make the"
    " first admin token with `schedd token create`); every node must agree",
)
@tls_options("node")
@click.option(
    "--max-message-bytes",
    envvar="SCHEDD_MAX_MESSAGE_BYTES",
    default=GRPC_MAX_MESSAGE_BYTES,
    show_default=True,
    type=click.IntRange(GRPC_MIN_MESSAGE_BYTES, 1 << 30),
    help="the largest gRPC message the node receives or sends (larger: RESOURCE_EXHAUSTED)",
)
@metrics_option
@http_options
@encryption_keys_option
def node(
    auth: bool,
    store: StoreConfig,
    listen: str,
    advertise: str,
    metrics_listen: str,
    http_listen: str,
    http_actions: bool,
    node_id: str | None,
    data_dir: str | None,
    partitions: int,
    prefix: bytes,
    session_ttl: int,
    max_clock_skew_ms: int,
    lease_timeout_ms: int,
    heartbeat_interval_ms: int,
    max_write_txns: int,
    max_dispatch_backlog: int,
    history_ttl_s: int,
    history_prune_interval_s: float,
    compaction_interval_s: float,
    compaction_keep_revisions: int,
    peer_timeout_ms: int,
    encryption_keys: str | None,
    tls_cert_file: str | None,
    tls_key_file: str | None,
    tls_ca_file: str | None,
    tls_server_name: str | None,
    max_message_bytes: int,
) -> None:
    """Run a scheduler node (TLS on its gRPC port with --tls-cert-file and --tls-key-file;
    mutual TLS with --tls-ca-file)."""
    from schedd.node import Node, NodeConfig
    from schedd.store import StoreFailed

    if heartbeat_interval_ms >= lease_timeout_ms:
        raise click.BadParameter(
            f"{heartbeat_interval_ms} ms must be below --lease-timeout-ms ({lease_timeout_ms} ms)",
            param_hint="--heartbeat-interval-ms",
        )
    tls = tls_files(tls_cert_file, tls_key_file, tls_ca_file, tls_server_name, server=True)
    nid = node_id or f"{socket.gethostname()}-{listen.rpartition(':')[2]}"
    bind_process(node=nid)  # every line this process logs names its node
    cfg = NodeConfig(
        node_id=nid,
        listen=listen,
        advertise=advertise,
        metrics_listen=metrics_listen,
        http_listen=http_listen,
        http_actions=http_actions,
        auth=auth,
        tls=tls,
        max_message_bytes=max_message_bytes,
        store=store,
        prefix=prefix,
        partitions=partitions,
        data_dir=Path(data_dir or f".schedd-node-{nid}"),
        session_ttl_s=session_ttl,
        max_clock_skew_ms=max_clock_skew_ms,
        lease_timeout_ms=lease_timeout_ms,
        heartbeat_interval_ms=heartbeat_interval_ms,
        max_write_txns=max_write_txns,
        max_dispatch_backlog=max_dispatch_backlog,
        history_ttl_ms=history_ttl_s * 1000,
        history_prune_interval_s=history_prune_interval_s,
        compaction_interval_s=compaction_interval_s,
        compaction_keep_revisions=compaction_keep_revisions,
        peer_timeout_ms=peer_timeout_ms,
        keyring=load_keyring(encryption_keys),
    )

    async def run() -> None:
        tune_gc()
        n = Node(cfg)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await n.start()
        _say("schedd node %s listening on %s", nid, n.address, node=nid)
        stopping = asyncio.ensure_future(stop.wait())
        failing = asyncio.ensure_future(n.failed.wait())
        await asyncio.wait([stopping, failing], return_when=asyncio.FIRST_COMPLETED)
        stopping.cancel()
        failing.cancel()
        if n.failed.is_set():  # nothing can be given back or released through the store
            await n.stop(graceful=False)
            raise StoreFailed(n.failure)
        await n.stop()

    try:
        asyncio.run(run())
    except SchedError as exc:
        _say("schedd node: %s", exc, node=nid, error=True)
        sys.exit(5)


@main.command()
@click.option(
    "--connect",
    envvar="SCHEDD_CONNECT",
    multiple=True,
    default=("127.0.0.1:7070",),
    show_default=True,
    help="node address(es), HOST:PORT[,...], repeatable; the other live nodes are discovered",
)
@click.option("--queue", "queues", multiple=True, default=("default",), show_default=True)
@click.option("--import", "imports", multiple=True, help="module with register(worker), repeatable")
@click.option("--worker-id", default=None)
@click.option("--capacity", default=16, show_default=True, type=click.IntRange(1, 10_000))
@click.option(
    "--prefetch",
    default=10_000,
    show_default=True,
    type=click.IntRange(0, 1_000_000),
    help="executions a node may send ahead of their instant, held here until it (0: none)",
)
@click.option("--data-dir", default=None, type=click.Path(file_okay=False))
@click.option(
    "--discover/--no-discover",
    default=True,
    show_default=True,
    help="connect to every live node the given ones name (nodes that join later too)",
)
@click.option(
    "--token",
    envvar="SCHEDD_WORKER_TOKEN",
    default=None,
    help="worker token for clusters with auth on (prefer the env variable SCHEDD_WORKER_TOKEN:"
    " a flag shows in the process list)",
)
@tls_options("worker")
@job_kind_options
@metrics_option
def worker(
    token: str | None,
    connect: tuple[str, ...],
    queues: tuple[str, ...],
    imports: tuple[str, ...],
    worker_id: str | None,
    capacity: int,
    prefetch: int,
    data_dir: str | None,
    discover: bool,
    metrics_listen: str,
    tls_cert_file: str | None,
    tls_key_file: str | None,
    tls_ca_file: str | None,
    tls_server_name: str | None,
    **kinds: Any,
) -> None:
    """Run a worker: the handlers the given modules register, HTTP jobs (unless --no-http)
    and, with --allow-shell, shell jobs. TLS to the nodes with --tls-ca-file (and a client
    certificate for nodes that require one: --tls-cert-file, --tls-key-file)."""
    from schedd.worker import run_worker_from_cli

    tls = tls_files(tls_cert_file, tls_key_file, tls_ca_file, tls_server_name, server=False)
    http, shell = job_kind_configs(kinds)
    tune_gc()
    sys.exit(
        run_worker_from_cli(
            list(connect),
            list(queues),
            list(imports),
            worker_id,
            capacity,
            data_dir,
            prefetch,
            discover,
            http=http,
            shell=shell,
            metrics_listen=metrics_listen,
            token=token,
            tls=tls,
        )
    )


@main.command()
@click.option(
    "--data-dir", default=".schedd-dev", show_default=True, type=click.Path(file_okay=False)
)
@click.option("--listen", default="127.0.0.1:7070", show_default=True)
@click.option(
    "--store",
    envvar="SCHEDD_STORE",
    default="rocksdb",
    show_default=True,
    help="rocksdb (embedded, in the data dir), etcd (a local etcd process, started here), or"
    " a store address: rocksdb:PATH, etcd://HOST:PORT[,...]",
)
@job_kind_options
@metrics_option(default="127.0.0.1:9464", https=False)  # type: ignore[untyped-decorator]
@http_options(default="127.0.0.1:8080", https=False)  # type: ignore[untyped-decorator]
def dev(
    data_dir: str,
    listen: str,
    store: str,
    metrics_listen: str,
    http_listen: str,
    http_actions: bool,
    **kinds: Any,
) -> None:
    """Start a node with its store (embedded by default: no etcd) and a worker with demo
    handlers (echo, sleep, fail, flaky) that runs HTTP jobs too (shell jobs with
    --allow-shell)."""
    from schedd.dev import run_dev

    http, shell = job_kind_configs(kinds)
    try:
        sys.exit(
            run_dev(
                Path(data_dir),
                listen,
                store=store,
                http=http,
                shell=shell,
                metrics_listen=metrics_listen,
                http_listen=http_listen,
                http_actions=http_actions,
            )
        )
    except (SchedError, RuntimeError, ValueError) as exc:
        _say("schedd dev: %s", exc, error=True)
        sys.exit(1)


main.add_command(token_group)
main.add_command(keys)

if __name__ == "__main__":
    main()

"""`schedd`: run a scheduler node, a worker, or a whole local cluster (`schedd dev`)."""

from __future__ import annotations

import asyncio
import logging
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from schedd._errors import SchedError
from schedd._gc import tune_gc
from schedd._limits import GRPC_MAX_MESSAGE_BYTES, GRPC_MIN_MESSAGE_BYTES
from schedd._logfmt import LOG_FORMATS, configure_logging, json_logs
from schedd.cli._bootstrap import token_group
from schedd.cli._keys import encryption_keys_option, keys
from schedd.cli._kinds import job_kind_configs, job_kind_options
from schedd.cli._node_command import node_config, serve_node
from schedd.cli._outbox import outbox
from schedd.cli._serve_flags import http_options, metrics_option, tls_files, tls_options
from schedd.cli._store_cmd import store_group
from schedd.cli._store_flags import store_options

if TYPE_CHECKING:
    from schedd.node import Node

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
def node(**flags: Any) -> None:
    """Run a scheduler node (TLS on its gRPC port with --tls-cert-file and --tls-key-file;
    mutual TLS with --tls-ca-file)."""
    cfg = node_config(**flags)

    def started(n: Node) -> None:
        _say("schedd node %s listening on %s", cfg.node_id, n.address, node=cfg.node_id)

    try:
        asyncio.run(serve_node(cfg, started))
    except SchedError as exc:
        _say("schedd node: %s", exc, node=cfg.node_id, error=True)
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
@click.option(
    "--shutdown-timeout",
    envvar="SCHEDD_WORKER_SHUTDOWN_TIMEOUT",
    default=30.0,
    show_default=True,
    type=click.FloatRange(0, 3600),
    help="on SIGTERM, seconds running executions may finish before they are cancelled and"
    " handed back (held ones go back at once); then up to 10 s for their results and 5 s to"
    " close each stream",
)
@tls_options("worker")
@job_kind_options
@metrics_option
def worker(
    token: str | None,
    shutdown_timeout: float,
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
            shutdown_timeout_s=shutdown_timeout,
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
main.add_command(store_group)
main.add_command(outbox)

if __name__ == "__main__":
    main()

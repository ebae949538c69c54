"""`schedd dev`: a store, one node and one worker with the demo handlers, in one command.

The store is the embedded one by default (``rocksdb`` in the data dir: no etcd, no root);
``--store etcd`` starts a local etcd process as the store, and a store address
(``rocksdb:PATH``, ``etcd://HOST:PORT``) uses that store as it is.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from schedd._logfmt import bind_process, json_logs
from schedd._stop_signal import stop_on_signals, until_stop_or_failure
from schedd.dashboard import Surfaces
from schedd.dev._etcd_process import EtcdProcess, port_is_free
from schedd.node import Node, NodeConfig
from schedd.obs import PrometheusRecorder
from schedd.store import EtcdConfig, RocksConfig, StoreConfig, parse_store, store_address

if TYPE_CHECKING:
    from schedd.worker import HttpConfig, ShellConfig, Worker

log = logging.getLogger("schedd.dev")

NODE_ID = "dev-node"

NEXT_STEPS = """
schedd dev is running:
  store   {store}   (data in {data})
  node    {node}   (gRPC: client API and worker streams)
  worker  {worker} (handlers: echo, sleep, fail, flaky; {kinds})
  metrics {metrics}
  dashboard {dashboard}

For trying things on this machine only: no TLS, no tokens (anyone who can reach these
ports may do anything), payloads unencrypted. A real cluster: docs/operations.md.

Try, in another terminal (source .venv/bin/activate first):
  schedctl job create hello --schedule '*/5 * * * * *' --handler echo --payload '{{"msg": "hi"}}'
  schedctl job list
  schedctl run list --job <ID from above>
  schedctl job create flaky --schedule '@after 2s' --handler flaky --payload '{{"failures": 2}}'
  schedctl job create doomed --schedule '@after 2s' --handler fail --max-attempts 2
  schedctl dlq list
  schedctl job create ping --schedule '@every 10s' --http https://example.com/ --method GET
  schedctl cluster status
  schedctl preview '30 2 * * *' --tz America/New_York --count 5

Ctrl-C stops everything; `make dev` again finds your jobs where you left them.
"""


def _etcd_ports() -> tuple[int | None, int | None]:
    if port_is_free(2379) and port_is_free(2380):
        return 2379, 2380
    return None, None


def _store(data_dir: Path, store: str) -> tuple[StoreConfig | None, EtcdProcess | None]:
    """The dev store: (its config, or None until the etcd process started; that process).

    Raises:
        ValueError: ``store`` is not ``rocksdb``, ``etcd`` or a store address.
    """
    if store in ("", "rocksdb"):
        return RocksConfig(data_dir / "store"), None
    if store == "etcd":
        client_port, peer_port = _etcd_ports()
        return None, EtcdProcess(data_dir / "etcd", client_port=client_port, peer_port=peer_port)
    return parse_store(store), None


async def _run(
    data_dir: Path,
    listen: str,
    store: str,
    http: HttpConfig | None,
    shell: ShellConfig | None,
    metrics_listen: str,
    http_listen: str = "",
    http_actions: bool = False,
) -> int:
    bind_process(node=NODE_ID)  # the one node: its id on every line (JSON logs)
    config, etcd = _store(data_dir, store)
    # One registry for the node and the worker of this process, served by the node; on
    # another port when the default one is taken (a second dev cluster, a local exporter).
    recorder = PrometheusRecorder(("node", "worker")) if metrics_listen else None
    metrics_listen = _or_any_port(metrics_listen, "metrics")
    http_listen = _or_any_port(http_listen, "the dashboard")
    if etcd is not None:
        await asyncio.to_thread(etcd.start)
        config = EtcdConfig(endpoints=(etcd.endpoint,))
    assert config is not None
    node_config = NodeConfig(
        node_id=NODE_ID,
        listen=listen,
        store=config,
        data_dir=data_dir / "node",
        partitions=8,
        metrics_listen=metrics_listen,
        http_listen=http_listen,
        http_actions=http_actions,
    )
    node = Node(node_config, recorder=recorder)
    stop = stop_on_signals()
    worker = None
    surfaces = Surfaces()
    try:
        await node.start()
        surfaces = await Surfaces.start(node.surface(), node_config)
        worker = await _start_worker(node.address, data_dir, http, shell, recorder)
        print(_next_steps(config, data_dir, node, surfaces, http, shell), flush=True)
        if await until_stop_or_failure(stop, node.failed):
            print(f"schedd dev: {node.failure}", file=sys.stderr, flush=True)
            return 5
        if json_logs():
            log.info("stopping…")
        else:
            print("stopping…", file=sys.stderr, flush=True)
        await worker.stop(graceful=True)
        return 0
    finally:
        if worker is not None:  # a no-op after the graceful stop above
            with contextlib.suppress(Exception):
                await worker.stop(graceful=False)
        with contextlib.suppress(Exception):
            await surfaces.stop()
        with contextlib.suppress(Exception):
            await node.stop()
        if etcd is not None:
            await asyncio.to_thread(etcd.stop)


async def _start_worker(
    address: str,
    data_dir: Path,
    http: HttpConfig | None,
    shell: ShellConfig | None,
    recorder: PrometheusRecorder | None,
) -> Worker:
    """The dev worker, started: the demo handlers, and HTTP and shell jobs if enabled."""
    from schedd.dev.demo_handlers import register
    from schedd.worker import HttpExecutor, Worker, WorkerConfig

    worker = Worker(
        WorkerConfig(endpoints=(address,), worker_id="dev-worker", data_dir=data_dir / "worker"),
        recorder=recorder,
    )
    register(worker)
    if http is not None:
        worker.add_executor("http", HttpExecutor(http))
    if shell is not None:
        from schedd.worker import ShellExecutor

        worker.add_executor("shell", ShellExecutor(shell))
    await worker.start()
    return worker


def _next_steps(
    config: StoreConfig,
    data_dir: Path,
    node: Node,
    surfaces: Surfaces,
    http: HttpConfig | None,
    shell: ShellConfig | None,
) -> str:
    return NEXT_STEPS.format(
        store=store_address(config),
        data=data_dir,
        node=node.address,
        worker="dev-worker",
        kinds=_kinds_text(http, shell),
        metrics=_metrics_text(surfaces),
        dashboard=_dashboard_text(surfaces),
    )


def _or_any_port(listen: str, what: str) -> str:
    """``listen``, or the same host with port 0 (any free one) when its port is taken."""
    host, _, port = listen.rpartition(":")
    if listen and port != "0" and not port_is_free(int(port), host or "127.0.0.1"):
        log.warning("port %s is taken: serving %s on another one", port, what)
        return f"{host}:0"
    return listen


def _metrics_text(surfaces: Surfaces) -> str:
    server = surfaces.metrics
    return f"http://{server.address}/metrics" if server is not None else "off (--metrics-listen)"


def _dashboard_text(surfaces: Surfaces) -> str:
    server = surfaces.dashboard
    if server is None:
        return "off (--http-listen)"
    return server.url + ("" if server.actions else " (read-only; --http-actions)")


def _kinds_text(http: HttpConfig | None, shell: ShellConfig | None) -> str:
    parts = ["HTTP jobs" if http is not None else "no HTTP jobs (--no-http)"]
    parts.append("shell jobs" if shell is not None else "no shell jobs (--allow-shell)")
    return ", ".join(parts)


def run_dev(
    data_dir: Path,
    listen: str,
    *,
    store: str = "rocksdb",
    http: HttpConfig | None = None,
    shell: ShellConfig | None = None,
    metrics_listen: str = "",
    http_listen: str = "",
    http_actions: bool = False,
) -> int:
    """Runs the dev cluster until Ctrl-C or SIGTERM; returns the exit code.

    The worker runs the demo handlers, HTTP jobs with ``http`` and shell jobs with ``shell``;
    ``store`` is ``rocksdb`` (embedded, in the data dir), ``etcd`` (a local etcd process
    started here) or a store address.
    """
    data_dir = data_dir.resolve()
    return asyncio.run(
        _run(data_dir, listen, store, http, shell, metrics_listen, http_listen, http_actions)
    )

"""What ``schedd node`` does with its flags: the node's config, then serving until a signal."""

from __future__ import annotations

import socket
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from schedd._gc import tune_gc
from schedd._logfmt import bind_process
from schedd._stop_signal import stop_on_signals, until_stop_or_failure
from schedd.cli._keys import load_keyring
from schedd.cli._serve_flags import tls_files

if TYPE_CHECKING:
    from schedd.node import Node, NodeConfig


def node_config(
    *,
    node_id: str | None,
    data_dir: str | None,
    session_ttl: int,
    history_ttl_s: int,
    encryption_keys: str | None,
    tls_cert_file: str | None,
    tls_key_file: str | None,
    tls_ca_file: str | None,
    tls_server_name: str | None,
    **same: Any,
) -> NodeConfig:
    """The node's config from the flags of ``schedd node`` (this process's log lines name the
    node from here on). ``same``: the flags named as the NodeConfig fields they set.

    Raises:
        click.BadParameter: naming the flag (a heartbeat interval not below the lease
            timeout, TLS flags that cannot be used).
    """
    from schedd.node import NodeConfig

    heartbeat_ms, lease_ms = same["heartbeat_interval_ms"], same["lease_timeout_ms"]
    if heartbeat_ms >= lease_ms:
        raise click.BadParameter(
            f"{heartbeat_ms} ms must be below --lease-timeout-ms ({lease_ms} ms)",
            param_hint="--heartbeat-interval-ms",
        )
    tls = tls_files(tls_cert_file, tls_key_file, tls_ca_file, tls_server_name, server=True)
    nid = node_id or f"{socket.gethostname()}-{same['listen'].rpartition(':')[2]}"
    bind_process(node=nid)  # every line this process logs names its node
    return NodeConfig(
        node_id=nid,
        tls=tls,
        data_dir=Path(data_dir or f".schedd-node-{nid}"),
        session_ttl_s=session_ttl,
        history_ttl_ms=history_ttl_s * 1000,
        keyring=load_keyring(encryption_keys),
        **same,
    )


async def serve_node(cfg: NodeConfig, started: Callable[[Node], None]) -> None:
    """Run a node, with its metrics endpoint and dashboard when configured, until SIGINT or
    SIGTERM (a graceful stop) or until its store fails (an abrupt stop, then StoreFailed);
    ``started(node)`` once it serves."""
    from schedd.dashboard import Surfaces
    from schedd.node import Node
    from schedd.store import StoreFailed

    tune_gc()
    recorder = None
    if cfg.metrics_listen:
        from schedd.obs import PrometheusRecorder

        recorder = PrometheusRecorder(("node",))
    n = Node(cfg, recorder=recorder)
    stop = stop_on_signals()
    await n.start()
    surfaces = await Surfaces.start(n.surface(), cfg)
    started(n)
    failed = await until_stop_or_failure(stop, n.failed)
    await surfaces.stop()
    if failed:
        # nothing can be given back or released through the store
        await n.stop(graceful=False)
        raise StoreFailed(n.failure)
    await n.stop()

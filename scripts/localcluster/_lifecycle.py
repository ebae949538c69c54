"""``up`` and ``down``: start what is not running, stop what is, in dependency order.

Order matters both ways. Up: etcd first (nodes exit when they cannot initialise against it),
then nodes, then workers (they connect to the nodes). Down: workers first (a graceful stop
lets their running attempts report), then nodes (SIGTERM makes a node release its partitions,
which needs etcd), then etcd.
"""

from __future__ import annotations

import shutil
import socket
import time
from dataclasses import replace

from localcluster import _etcd, _schedd
from localcluster._config import HOST, REPO_ROOT, STATE_FILE, ClusterConfig, record, recorded
from localcluster._procs import Daemon, stop_all


class ClusterError(Exception):
    """Up or down cannot go on; the message says why and what to do."""


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((HOST, port))
        except OSError:
            return False
        return True


def _all_daemons(config: ClusterConfig) -> list[Daemon]:
    return _etcd.daemons(config) + _schedd.node_daemons(config) + _schedd.worker_daemons(config)


def _layout(config: ClusterConfig) -> tuple[object, ...]:
    return (
        config.base_port,
        config.etcd_members,
        config.nodes,
        config.workers,
        config.partitions,
        config.prefix,
        config.tls,
    )


def _check_layout(config: ClusterConfig) -> None:
    """A cluster running in the directory must have been started with this layout, and one
    whose etcd holds data keeps its TLS setting (the members recorded their peer URLs)."""
    before = recorded(config)
    if before is None or _layout(before) == _layout(config):
        return
    if before.tls != config.tls and config.etcd_dir.exists():
        raise ClusterError(
            f"the cluster in {config.dir} was made with TLS {'on' if before.tls else 'off'}: "
            "switching needs scripts/cluster-down --wipe first"
        )
    if any(d.pid() is not None for d in _all_daemons(before)):
        raise ClusterError(
            f"the cluster in {config.dir} runs with another layout (base_port "
            f"{before.base_port}, {before.etcd_members} etcd members, {before.nodes} nodes, "
            f"{before.workers} workers, {before.partitions} partitions, TLS "
            f"{'on' if before.tls else 'off'}): run scripts/cluster-down first"
        )


def _check_ports(config: ClusterConfig) -> None:
    """The ports of the processes about to start must be free (an error names the first one
    taken, before anything starts)."""
    wanted: list[tuple[str, int]] = []
    for i, d in enumerate(_etcd.daemons(config)):
        if d.pid() is None:
            port = config.etcd_client_port(i)
            wanted += [(f"etcd {d.name}", port), (f"etcd {d.name} peer", port + 1)]
    for d in _schedd.node_daemons(config):
        if d.pid() is None:
            wanted.append((d.name, int(config.node_address(d.name).rpartition(":")[2])))
    for what, port in wanted:
        if not _port_free(port):
            raise ClusterError(
                f"port {port} ({what}) is taken by another program: choose other ports with "
                "SCHEDD_CLUSTER_BASE_PORT=N (see cluster/local.ini)"
            )


def _start(daemons: list[Daemon], argv_of: dict[str, list[str]]) -> None:
    env = _schedd.child_env()
    for d in daemons:
        pid = d.pid()
        if pid is not None:
            print(f"  {d.name} already running (pid {pid})")
            continue
        d.pid_file.parent.mkdir(parents=True, exist_ok=True)
        pid = d.start(argv_of[d.name], cwd=REPO_ROOT, env=env)
        print(f"  {d.name} started (pid {pid}, log {_short(d.log_file)})")


def _short(path: object) -> str:
    text = str(path)
    root = str(REPO_ROOT) + "/"
    return text.removeprefix(root)


#: Ownership counts as settled when two looks this far apart find it whole and balanced.
SETTLE_S = 1.0


def _wait_whole(config: ClusterConfig) -> _schedd.ClusterView:
    """Until every node serves, owns its share and sees every worker, twice in a row
    ``SETTLE_S`` apart (a rebalance releases a partition before another node claims it, so
    one look can fall between the two); fails early, with the log's tail, when a process
    exits."""
    deadline = time.monotonic() + config.start_timeout_s
    daemons = _schedd.node_daemons(config) + _schedd.worker_daemons(config)
    settled_since: float | None = None
    while True:
        for d in daemons:
            if d.pid() is None:
                raise ClusterError(f"{d.name} exited; the end of {_short(d.log_file)}:\n{d.tail()}")
        view = _schedd.ClusterView(_schedd.ask_nodes(config, timeout_s=2.0))
        if _schedd.is_whole(config, view) and _schedd.is_balanced(view):
            now = time.monotonic()
            if settled_since is None:
                settled_since = now
            elif now - settled_since >= SETTLE_S:
                return view
            time.sleep(min(0.5, SETTLE_S))
            continue
        settled_since = None
        if time.monotonic() > deadline:
            why = "; ".join(f"{a.node}: {a.error}" for a in view.answers if a.error)
            raise ClusterError(
                f"the cluster was not whole after {config.start_timeout_s:g} s "
                f"(unowned partitions: {view.unowned() or 'none'}; "
                f"owned per node: {_schedd.shares(view)}; "
                f"workers: {sorted(view.workers().items())}; {why or 'every node answered'}); "
                f"see the logs under {_short(config.dir)}/"
            )
        time.sleep(0.5)


NEXT_STEPS = """
The local cluster is up ({dir}/):
  etcd     {etcd}
  nodes    {nodes}
  workers  {workers} (handlers: {handlers}){tls}

Try (in this shell):
  source .venv/bin/activate
  export SCHEDCTL_ENDPOINTS={endpoints}{tls_env}
  schedctl job create hello --schedule '*/5 * * * * *' --handler echo --payload '{{"msg": "hi"}}'
  schedctl run list
  schedctl cluster status
  scripts/cluster-status                  # members, nodes, partition owners, workers, skew
  kill -9 $(cat {dir}/{node}/node.pid)   # a node failover drill; cluster-up starts it again
  scripts/cluster-down                    # stop everything (--wipe: delete the data too)
"""


TLS_NOTE = """
  TLS      everywhere, certificates in {certs}/ (scripts/dev-ca): etcd and the nodes require
           client certificates; schedctl needs --cacert, --cert and --key (or the variables
           below)"""
TLS_ENV = """
  export SCHEDCTL_CACERT={certs}/ca.pem SCHEDCTL_CERT={certs}/client.pem
  export SCHEDCTL_KEY={certs}/client-key.pem"""


def _make_certificates(config: ClusterConfig) -> None:
    """The dev CA's files in the cluster's tls directory (kept when they are there)."""
    from schedd.dev._ca import DevCaError, make_dev_ca

    try:
        made = make_dev_ca(config.tls_dir)
    except (DevCaError, OSError) as exc:
        raise ClusterError(f"certificates: {exc}") from exc
    where = _short(config.tls_dir)
    print(f"certificates: {'made in' if made else 'kept in'} {where}/ (scripts/dev-ca)")


def up(config: ClusterConfig) -> None:
    """Starts whatever of the cluster is not running and waits until it is whole. A cluster
    made with TLS stays so (``up`` without ``--tls`` restarts what is missing of it)."""
    if shutil.which("etcd") is None:
        raise ClusterError("etcd is not on PATH (make etcd, or apt-get install etcd-server)")
    before = recorded(config)
    if before is not None and before.tls and not config.tls:
        config = replace(config, tls=True)
    _check_layout(config)
    _check_ports(config)
    if config.tls:
        _make_certificates(config)
    record(config)
    print(f"etcd ({config.etcd_members} members):")
    try:
        _etcd.start(config)
    except RuntimeError as exc:
        raise ClusterError(str(exc)) from exc
    print(f"nodes ({config.nodes}):")
    _start(
        _schedd.node_daemons(config),
        {n: _schedd.node_argv(config, n) for n in config.node_names},
    )
    print(f"workers ({config.workers}):")
    _start(
        _schedd.worker_daemons(config),
        {w: _schedd.worker_argv(config, w) for w in config.worker_names},
    )
    started = time.monotonic()
    print("waiting for every node to serve and own its partitions, and every worker to connect")
    view = _wait_whole(config)
    print(f"whole after {time.monotonic() - started:.1f} s")
    print(
        NEXT_STEPS.format(
            dir=_short(config.dir),
            etcd=",".join(config.etcd_endpoints),
            nodes=", ".join(f"{n} {config.node_address(n)}" for n in config.node_names),
            workers=", ".join(config.worker_names) or "(none)",
            handlers=", ".join(_handlers(view)) or "-",
            endpoints=",".join(config.node_addresses),
            node=config.node_names[-1],
            tls=TLS_NOTE.format(certs=_short(config.tls_dir)) if config.tls else "",
            tls_env=TLS_ENV.format(certs=_short(config.tls_dir)) if config.tls else "",
        )
    )


def _handlers(view: _schedd.ClusterView) -> list[str]:
    names: set[str] = set()
    for answer in view.answers:
        for w in (answer.status or {}).get("workers", []):
            names.update(str(h) for h in w.get("handlers", []))
    return sorted(names)


def down(config: ClusterConfig, *, wipe: bool) -> None:
    """Stops every process of the cluster (workers, nodes, then etcd); ``wipe`` then deletes
    the cluster directory (data, logs, pid files)."""
    running = recorded(config) or config
    followers, leaders = _etcd_stop_order(running)
    groups = (
        ("workers", _schedd.worker_daemons(running)),
        ("nodes", _schedd.node_daemons(running)),
        ("etcd", followers),
        ("etcd leader", leaders),
    )
    stopped_any = False
    for label, daemons in groups:
        lines = stop_all(daemons, running.stop_timeout_s)
        if lines:
            stopped_any = True
            print(f"{label}:")
            for line in lines:
                print(f"  {line}")
    if not stopped_any:
        print(f"nothing running in {_short(config.dir)}")
    if wipe:
        _wipe(config)


def _etcd_stop_order(config: ClusterConfig) -> tuple[list[Daemon], list[Daemon]]:
    """The members split into (followers, leader): stopped together, every member waits for
    its peers and the whole takes ~7 s; followers first, then the leader alone, ~3.5 s."""
    daemons = _etcd.daemons(config)
    try:
        context = _etcd.client_context(config)
        views = _etcd.members(config.etcd_endpoints, 1.0, context)
        leaders = {v.name for v in views if v.leader}
    except _etcd.EtcdUnreachable:
        leaders = set()
    return (
        [d for d in daemons if d.name not in leaders],
        [d for d in daemons if d.name in leaders],
    )


def _wipe(config: ClusterConfig) -> None:
    """Deletes the cluster directory, only if it is one (a typo in SCHEDD_CLUSTER_DIR must not
    delete someone's home)."""
    target = config.dir
    if not target.exists():
        print(f"nothing to wipe: {_short(target)} does not exist")
        return
    if not (target / STATE_FILE).exists():
        raise ClusterError(
            f"not wiping {target}: it has no {STATE_FILE}, so it is not a cluster directory"
        )
    shutil.rmtree(target)
    print(f"wiped {_short(target)}/ (data, logs, pid files)")

"""The local etcd cluster: started by ``cluster/etcd-cluster.sh``, inspected over etcd's HTTP API.

Why HTTP and not our etcd client: schedd's store wrapper (``schedd.store``) covers what a node
needs (KV, leases, watches) and nothing of etcd's cluster API (member list, member status),
``etcdctl`` is not installed everywhere (Debian ships it apart from the server, in
etcd-client), and every etcd member serves its v3 API as JSON over HTTP on its client port
(the gRPC gateway: ``/health``, ``/v3/cluster/member/list``, ``/v3/maintenance/status``,
``/v3/kv/range``), so plain ``urllib`` does: over HTTP, or over HTTPS with the client
certificate of the dev CA when the cluster runs with TLS (:func:`client_context`).
"""

from __future__ import annotations

import base64
import json
import os
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any

from localcluster._config import REPO_ROOT, ClusterConfig
from localcluster._procs import Daemon

SCRIPT = REPO_ROOT / "cluster" / "etcd-cluster.sh"


class EtcdUnreachable(Exception):
    """No member answered."""


def daemons(config: ClusterConfig) -> list[Daemon]:
    """The members as :class:`Daemon` (the pid files etcd-cluster.sh writes)."""
    return [
        Daemon(
            name=name,
            pid_file=config.etcd_dir / name / "etcd.pid",
            log_file=config.etcd_dir / name / "etcd.log",
            marker=str(config.etcd_dir / name / "data"),
        )
        for name in config.etcd_names
    ]


def start(config: ClusterConfig) -> None:
    """Starts the members not running and waits until each is healthy (has a leader: quorum).

    Raises:
        RuntimeError: the script failed (its output says why).
    """
    argv = [
        "bash", str(SCRIPT), "start",
        "--members", str(config.etcd_members),
        "--dir", str(config.etcd_dir),
        "--base-port", str(config.base_port),
    ]  # fmt: skip
    if config.tls:
        argv += ["--tls", str(config.tls_dir)]
    out = subprocess.run(argv, capture_output=True, text=True, check=False, env=dict(os.environ))
    for line in (out.stdout + out.stderr).splitlines():
        print(f"  etcd: {line}")
    if out.returncode != 0:
        raise RuntimeError(f"cluster/etcd-cluster.sh start failed (exit {out.returncode})")


def client_context(config: ClusterConfig) -> ssl.SSLContext | None:
    """How to reach the members: None (HTTP), or with TLS the etcd CA and the nodes' client
    certificate of the dev CA (the members require one)."""
    if not config.tls:
        return None
    ctx = ssl.create_default_context(cafile=config.tls_file("etcd-ca.pem"))
    ctx.load_cert_chain(config.tls_file("etcd-client.pem"), config.tls_file("etcd-client-key.pem"))
    return ctx


def _call(
    endpoint: str,
    path: str,
    body: dict[str, Any] | None,
    timeout_s: float,
    context: ssl.SSLContext | None = None,
) -> Any:
    url = f"{'https' if context else 'http'}://{endpoint}{path}"
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method="GET" if body is None else "POST")
    with urllib.request.urlopen(req, timeout=timeout_s, context=context) as resp:
        return json.loads(resp.read())


@dataclass
class MemberView:
    """One member as the cluster and the member itself report it."""

    name: str
    member_id: str
    client_urls: list[str]
    reachable: bool = False
    healthy: bool = False
    leader: bool = False
    version: str = ""
    db_size: int = 0
    #: What of ``db_size`` holds data; the rest is free space a defrag returns to the OS.
    db_size_in_use: int = 0
    raft_term: int = 0
    error: str = ""

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def members(
    endpoints: list[str], timeout_s: float = 2.0, context: ssl.SSLContext | None = None
) -> list[MemberView]:
    """Every member the cluster lists (asked of the first endpoint that answers), each with
    its own health and status (over HTTPS with ``context``).

    Raises:
        EtcdUnreachable: no endpoint answered the member list.
    """
    listing: Any = None
    errors: list[str] = []
    for ep in endpoints:
        try:
            listing = _call(ep, "/v3/cluster/member/list", {}, timeout_s, context)
            break
        except (urllib.error.URLError, OSError, ValueError) as exc:
            errors.append(f"{ep}: {exc}")
    if listing is None:
        raise EtcdUnreachable("; ".join(errors))
    views: list[MemberView] = []
    for m in listing.get("members", []):
        view = MemberView(
            name=m.get("name", "") or "(not started)",
            member_id=f"{int(m.get('ID', 0)):x}",
            client_urls=list(m.get("clientURLs", [])),
        )
        _probe(view, timeout_s, context)
        views.append(view)
    return sorted(views, key=lambda v: v.name)


def _probe(view: MemberView, timeout_s: float, context: ssl.SSLContext | None) -> None:
    if not view.client_urls:
        view.error = "no client URL (member added, never started)"
        return
    endpoint = view.client_urls[0].removeprefix("http://").removeprefix("https://")
    try:
        status = _call(endpoint, "/v3/maintenance/status", {}, timeout_s, context)
        view.reachable = True
        view.version = str(status.get("version", ""))
        view.db_size = int(status.get("dbSize", 0))
        view.db_size_in_use = int(status.get("dbSizeInUse", 0))
        view.raft_term = int(status.get("raftTerm", 0))
        header_id = int(status.get("header", {}).get("member_id", 0))
        view.leader = header_id != 0 and header_id == int(status.get("leader", 0))
        health = _call(endpoint, "/health", None, timeout_s, context)
        view.healthy = str(health.get("health")) == "true"
    except (urllib.error.URLError, OSError, ValueError) as exc:
        view.error = str(getattr(exc, "reason", exc))


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


def _prefix_end(prefix: bytes) -> bytes:
    end = bytearray(prefix)
    end[-1] += 1  # our prefixes end in "/", never 0xff
    return bytes(end)


def node_records(
    endpoints: list[str],
    prefix: str,
    timeout_s: float = 2.0,
    context: ssl.SSLContext | None = None,
) -> dict[str, Any]:
    """``nodes/`` records as ``{node_id: (mod_revision, record dict)}``.

    Raises:
        EtcdUnreachable: no endpoint answered.
    """
    start = (prefix.rstrip("/") + "/nodes/").encode()
    body = {"key": _b64(start), "range_end": _b64(_prefix_end(start))}
    errors: list[str] = []
    for ep in endpoints:
        try:
            resp = _call(ep, "/v3/kv/range", body, timeout_s, context)
        except (urllib.error.URLError, OSError, ValueError) as exc:
            errors.append(f"{ep}: {exc}")
            continue
        out: dict[str, Any] = {}
        for kv in resp.get("kvs", []):
            record = json.loads(base64.b64decode(kv["value"]))
            out[str(record["node_id"])] = (int(kv.get("mod_revision", 0)), record)
        return out
    raise EtcdUnreachable("; ".join(errors))


def clock_offsets(
    endpoints: list[str],
    prefix: str,
    *,
    wait_s: float = 2.6,
    poll_s: float = 0.05,
    context: ssl.SSLContext | None = None,
) -> dict[str, int]:
    """Each node's clock minus this machine's, in ms, as the nodes' own records show it.

    A node rewrites its record (``nodes/{id}``, with ``clock_ms``, its wall clock then) every
    2 s. Reading the records every ``poll_s``, a record seen changed was written between the
    previous read and this one, so ``clock_ms`` minus the middle of that interval is the
    node's offset to within half of it (plus the write's delivery, a few ms on loopback).
    Nodes whose record did not change within ``wait_s`` are left out.
    """
    previous_ms = int(time.time() * 1000)  # when the read before started
    first = node_records(endpoints, prefix, context=context)
    seen = {node: rev for node, (rev, _) in first.items()}
    offsets: dict[str, int] = {}
    deadline = time.monotonic() + wait_s
    while len(offsets) < len(seen) and time.monotonic() < deadline:
        time.sleep(poll_s)
        start_ms = int(time.time() * 1000)
        records = node_records(endpoints, prefix, context=context)
        middle_ms = (previous_ms + int(time.time() * 1000)) // 2
        for node, (rev, record) in records.items():
            if node in seen and node not in offsets and rev != seen[node]:
                offsets[node] = int(record["clock_ms"]) - middle_ms
        previous_ms = start_ms
    return offsets

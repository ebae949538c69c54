"""The local cluster's pure parts: configuration (file, overrides, errors) and the decisions
``up`` and ``status`` take from what the nodes answer (settled ownership, clock skew)."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest

from localcluster import _config, _schedd, _status

INI = """
[cluster]
dir = .schedd-cluster
base_port = 23790
etcd_members = 3
nodes = 3
workers = 2
partitions = 12
prefix = /schedd/v1/
session_ttl_s = 5
max_clock_skew_ms = 500
worker_import = schedd.dev.demo_handlers
worker_queue = default
worker_capacity = 16
log_level = info
start_timeout_s = 60
stop_timeout_s = 20
"""


def _load(tmp_path: Path, text: str = INI, **env: str) -> _config.ClusterConfig:
    path = tmp_path / "local.ini"
    path.write_text(text)
    return _config.load({"SCHEDD_CLUSTER_CONFIG": str(path), **env})


def test_the_repository_file_loads() -> None:
    config = _config.load({})
    assert config.etcd_members == 3 and config.nodes == 3 and config.workers == 2
    assert config.dir == _config.REPO_ROOT / ".schedd-cluster"


def test_layout_follows_the_base_port(tmp_path: Path) -> None:
    config = _load(tmp_path, SCHEDD_CLUSTER_BASE_PORT="31000", SCHEDD_CLUSTER_DIR=str(tmp_path))
    assert config.etcd_endpoints == ["127.0.0.1:31000", "127.0.0.1:31002", "127.0.0.1:31004"]
    assert config.node_addresses == ["127.0.0.1:31010", "127.0.0.1:31011", "127.0.0.1:31012"]
    assert config.ports == [31000, 31001, 31002, 31003, 31004, 31005, 31010, 31011, 31012]
    assert config.dir == tmp_path


def test_a_recorded_layout_round_trips(tmp_path: Path) -> None:
    config = _load(tmp_path, SCHEDD_CLUSTER_DIR=str(tmp_path / "c"))
    _config.record(config)
    assert _config.recorded(config) == config


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"SCHEDD_CLUSTER_ETCD_MEMBERS": "2"}, "etcd_members: 1, 3 or 5, got 2"),
        ({"SCHEDD_CLUSTER_WORKERS": "-1"}, "workers: between 0 and 20, got -1"),
        ({"SCHEDD_CLUSTER_START_TIMEOUT_S": "soon"}, "start_timeout_s: 'soon' is not a number"),
    ],
)
def test_a_bad_value_names_its_key(tmp_path: Path, env: dict[str, str], message: str) -> None:
    with pytest.raises(_config.ConfigError) as err:
        _load(tmp_path, **env)
    assert str(err.value) == message


def test_an_unknown_or_missing_key_is_named(tmp_path: Path) -> None:
    with pytest.raises(_config.ConfigError, match=r"unknown key.*: colour"):
        _load(tmp_path, INI + "colour = blue\n")
    with pytest.raises(_config.ConfigError, match=r"^nodes: missing$"):
        _load(tmp_path, INI.replace("nodes = 3\n", ""))


def _view(counts: dict[str, int], partitions: int, unowned: int = 0) -> _schedd.ClusterView:
    owners = [node for node, n in counts.items() for _ in range(n)]
    owners += [""] * unowned
    assert len(owners) == partitions
    status: dict[str, Any] = {
        "partition_count": partitions,
        "nodes": [{"node_id": node} for node in counts],
        "partitions": [
            {"partition": p, "owner": owner, "epoch": 7} for p, owner in enumerate(owners)
        ],
        "workers": [],
    }
    return _schedd.ClusterView([_schedd.NodeAnswer("node-1", "127.0.0.1:1", status)])


@pytest.mark.parametrize(
    ("counts", "partitions", "unowned", "settled"),
    [
        ({"a": 4, "b": 4, "c": 4}, 12, 0, True),
        ({"a": 22, "b": 22, "c": 20}, 64, 0, True),  # nobody above ceil(64/3): nothing moves
        ({"a": 32, "b": 32, "c": 0}, 64, 0, False),  # c just joined: a and b will release
        ({"a": 4, "b": 4, "c": 3}, 12, 1, False),  # a partition between release and claim
    ],
)
def test_ownership_is_settled_when_nothing_will_move(
    counts: dict[str, int], partitions: int, unowned: int, settled: bool
) -> None:
    view = _view(counts, partitions, unowned)
    assert _schedd.is_balanced(view) is settled
    assert _schedd.shares(view) == counts


def test_skew_is_measured_from_the_median_node() -> None:
    assert _status._skew({"a": 10, "b": 25, "c": 700}) == {"a": -15, "b": 0, "c": 675}
    assert _status._skew({}) == {}


def test_tls_is_off_unless_asked_and_an_older_record_still_loads(tmp_path: Path) -> None:
    assert _load(tmp_path).tls is False  # the key is optional
    assert _load(tmp_path, INI + "tls = yes\n").tls is True
    assert _load(tmp_path, SCHEDD_CLUSTER_TLS="true").tls is True
    with pytest.raises(_config.ConfigError, match=r"^tls: 'maybe' is not true or false$"):
        _load(tmp_path, SCHEDD_CLUSTER_TLS="maybe")
    config = _load(tmp_path, SCHEDD_CLUSTER_DIR=str(tmp_path / "c"))
    _config.record(config)
    record = tmp_path / "c" / _config.STATE_FILE
    record.write_text(record.read_text().replace('  "tls": false,\n', ""))  # before TLS
    assert _config.recorded(config) == config


def test_with_tls_every_process_gets_its_certificates(tmp_path: Path) -> None:
    plain = _load(tmp_path, SCHEDD_CLUSTER_DIR=str(tmp_path))
    assert not any(a.startswith(("--tls", "--etcd-c")) for a in _schedd.node_argv(plain, "node-1"))
    assert _schedd.schedctl_tls_args(plain) == []
    config = _load(tmp_path, SCHEDD_CLUSTER_DIR=str(tmp_path), SCHEDD_CLUSTER_TLS="1")

    def flags(argv: list[str]) -> dict[str, str]:
        return {a: b for a, b in itertools.pairwise(argv) if a.startswith("--")}

    node = flags(_schedd.node_argv(config, "node-1"))
    certs = tmp_path / "tls"
    assert node["--tls-cert-file"] == str(certs / "node.pem")
    assert node["--tls-ca-file"] == str(certs / "ca.pem")
    assert node["--etcd-cert"] == str(certs / "etcd-client.pem")
    assert node["--etcd-server-name"] == "localhost"
    worker = flags(_schedd.worker_argv(config, "worker-1"))
    assert worker["--tls-cert-file"] == str(certs / "worker.pem")
    assert worker["--tls-ca-file"] == str(certs / "ca.pem")
    assert flags(_schedd.schedctl_tls_args(config)) == {
        "--cacert": str(certs / "ca.pem"),
        "--cert": str(certs / "client.pem"),
        "--key": str(certs / "client-key.pem"),
    }

"""The local cluster's configuration: ``cluster/local.ini``, then ``SCHEDD_CLUSTER_*`` variables.

Everything a command needs is derived here (ports, names, directories), so ``up``, ``down`` and
``status`` agree on the layout. ``up`` records what it started in ``DIR/cluster.json``; the
other commands read that record, so they find the cluster even when the variables that placed
it differ now.
"""

from __future__ import annotations

import configparser
import json
import os
from dataclasses import MISSING, asdict, dataclass, fields
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_CONFIG = REPO_ROOT / "cluster" / "local.ini"
ENV_PREFIX = "SCHEDD_CLUSTER_"
STATE_FILE = "cluster.json"
HOST = "127.0.0.1"
#: Node N (1-based) listens on base_port + NODE_PORT_OFFSET + N - 1.
NODE_PORT_OFFSET = 10


class ConfigError(Exception):
    """A configuration value that cannot be used; the message names the key."""


@dataclass(frozen=True)
class ClusterConfig:
    """What ``cluster/local.ini`` holds (see the comments there for each key)."""

    dir: Path
    base_port: int
    etcd_members: int
    nodes: int
    workers: int
    partitions: int
    prefix: str
    session_ttl_s: int
    max_clock_skew_ms: int
    worker_import: str
    worker_queue: str
    worker_capacity: int
    log_level: str
    start_timeout_s: float
    stop_timeout_s: float
    #: TLS everywhere (``cluster-up --tls``): etcd with client certificates, nodes with
    #: mutual TLS, workers and schedctl with client certificates, from ``DIR/tls``.
    tls: bool = False

    def __post_init__(self) -> None:
        if self.etcd_members not in (1, 3, 5):
            raise ConfigError(f"etcd_members: 1, 3 or 5, got {self.etcd_members}")
        if not 1 <= self.nodes <= 20:
            raise ConfigError(f"nodes: between 1 and 20, got {self.nodes}")
        if not 0 <= self.workers <= 20:
            raise ConfigError(f"workers: between 0 and 20, got {self.workers}")
        if not 1024 <= self.base_port <= 65535 - NODE_PORT_OFFSET - self.nodes:
            raise ConfigError(f"base_port: {self.base_port} leaves no room for every port")
        if self.log_level not in ("debug", "info", "warning"):
            raise ConfigError(f"log_level: debug, info or warning, got {self.log_level!r}")

    # -- the layout ------------------------------------------------------------------------

    @property
    def etcd_dir(self) -> Path:
        """The directory of cluster/etcd-cluster.sh (members in ``mI/``)."""
        return self.dir / "etcd"

    def etcd_client_port(self, index: int) -> int:
        return self.base_port + 2 * index

    @property
    def etcd_names(self) -> list[str]:
        return [f"m{i}" for i in range(self.etcd_members)]

    @property
    def etcd_endpoints(self) -> list[str]:
        return [f"{HOST}:{self.etcd_client_port(i)}" for i in range(self.etcd_members)]

    @property
    def node_names(self) -> list[str]:
        return [f"node-{n}" for n in range(1, self.nodes + 1)]

    def node_address(self, name: str) -> str:
        number = int(name.rpartition("-")[2])
        return f"{HOST}:{self.base_port + NODE_PORT_OFFSET + number - 1}"

    @property
    def node_addresses(self) -> list[str]:
        return [self.node_address(n) for n in self.node_names]

    @property
    def worker_names(self) -> list[str]:
        return [f"worker-{n}" for n in range(1, self.workers + 1)]

    @property
    def tls_dir(self) -> Path:
        """Where ``cluster-up --tls`` keeps the certificates (scripts/dev-ca's files)."""
        return self.dir / "tls"

    def tls_file(self, name: str) -> str:
        """The path of one of the dev CA's files (``ca.pem``, ``node-key.pem``...)."""
        return str(self.tls_dir / name)

    @property
    def ports(self) -> list[int]:
        """Every port the cluster listens on (etcd client and peer ports, node ports)."""
        etcd = [self.base_port + i for i in range(2 * self.etcd_members)]
        return etcd + [int(a.rpartition(":")[2]) for a in self.node_addresses]

    # -- the record of a running cluster ---------------------------------------------------

    def to_json(self) -> str:
        data = asdict(self)
        data["dir"] = str(self.dir)
        return json.dumps(data, indent=2, sort_keys=True) + "\n"

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ClusterConfig:
        """Builds a config from raw values (strings from the ini or env, or JSON values)."""
        values: dict[str, Any] = {}
        for f in fields(cls):
            if f.name not in data:
                if f.default is not MISSING:  # a key added later: an older record lacks it
                    continue
                raise ConfigError(f"{f.name}: missing")
            values[f.name] = _convert(f.name, str(f.type), data[f.name])
        return cls(**values)


_BOOLS = {"true": True, "yes": True, "on": True, "1": True,
          "false": False, "no": False, "off": False, "0": False}  # fmt: skip


def _convert(name: str, kind: str, raw: Any) -> Any:
    if kind == "bool":
        if isinstance(raw, bool):
            return raw
        value = _BOOLS.get(str(raw).strip().lower())
        if value is None:
            raise ConfigError(f"{name}: {raw!r} is not true or false")
        return value
    try:
        if kind == "int":
            return int(raw)
        if kind == "float":
            return float(raw)
        if kind == "Path":
            path = Path(str(raw)).expanduser()
            return path if path.is_absolute() else REPO_ROOT / path
        return str(raw).strip()
    except ValueError as exc:
        what = {"int": "a whole number", "float": "a number"}.get(kind, kind)
        raise ConfigError(f"{name}: {raw!r} is not {what}") from exc


def load(env: dict[str, str] | None = None) -> ClusterConfig:
    """The configuration in effect: the ini file, with ``SCHEDD_CLUSTER_<KEY>`` overrides.

    Raises:
        ConfigError: the file is missing or a value does not fit.
    """
    environ = os.environ if env is None else env
    path = Path(environ.get(ENV_PREFIX + "CONFIG", str(DEFAULT_CONFIG)))
    parser = configparser.ConfigParser(interpolation=None)
    if not parser.read(path):
        raise ConfigError(f"config: cannot read {path}")
    if not parser.has_section("cluster"):
        raise ConfigError(f"config: {path} has no [cluster] section")
    data: dict[str, Any] = dict(parser.items("cluster"))
    known = {f.name for f in fields(ClusterConfig)}
    unknown = set(data) - known
    if unknown:
        raise ConfigError(f"config: unknown key(s) in {path}: {', '.join(sorted(unknown))}")
    for key in known:
        value = environ.get(ENV_PREFIX + key.upper())
        if value is not None:
            data[key] = value
    return ClusterConfig.from_dict(data)


def recorded(config: ClusterConfig) -> ClusterConfig | None:
    """The configuration ``up`` recorded in the cluster directory; None when there is none."""
    path = config.dir / STATE_FILE
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except ValueError as exc:
        raise ConfigError(f"{path}: not valid JSON ({exc})") from exc
    return ClusterConfig.from_dict(data)


def record(config: ClusterConfig) -> None:
    config.dir.mkdir(parents=True, exist_ok=True)
    (config.dir / STATE_FILE).write_text(config.to_json())

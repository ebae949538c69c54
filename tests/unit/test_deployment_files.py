"""The deployment files in cluster/systemd and cluster/k8s agree with the real CLI and each other.

Every ``schedd node`` / ``schedd worker`` command line in them (systemd ExecStart, container
args), with the environment their example files or ConfigMap give, is parsed by the real click
commands, so a renamed or removed flag, a variable no option reads, or a value out of range
fails here rather than on a production host. The Kubernetes objects are checked for what the
scheduler relies on: stable node ids, a headless Service publishing not-ready pods, gRPC
readiness, TCP liveness, grace periods longer than a graceful stop, selectors that match.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import click
import pytest
import yaml

from schedd.cli.schedd_main import main as schedd_cli
from schedd.node import NodeConfig
from schedd.worker import WorkerConfig

ROOT = Path(__file__).resolve().parents[2]
SYSTEMD = ROOT / "cluster" / "systemd"
K8S = ROOT / "cluster" / "k8s"
SCHEDD_BIN = "/opt/schedd/bin/schedd"
#: Read from the environment by the `schedd` group itself, not by an option's envvar.
GROUP_ENV = {"SCHEDD_LOG_LEVEL"}

# -- the CLI ---------------------------------------------------------------------------------


def _command(name: str) -> click.Command:
    command = schedd_cli.commands[name]
    assert isinstance(command, click.Command)
    return command


def _envvars(name: str) -> set[str]:
    return {p.envvar for p in _command(name).params if isinstance(p.envvar, str)}


def _existing_paths(name: str, env: Mapping[str, str], tmp_path: Path) -> dict[str, str]:
    """``env`` with the values of options that must name an existing file pointed at one
    (the TLS files of the examples are not on this machine)."""
    out = dict(env)
    for param in _command(name).params:
        if (
            isinstance(param.type, click.Path)
            and param.type.exists
            and isinstance(param.envvar, str)
            and param.envvar in out
        ):
            stand_in = tmp_path / param.envvar.lower()
            stand_in.write_text("stand-in\n")
            out[param.envvar] = str(stand_in)
    return out


def _parse(
    argv: list[str], env: Mapping[str, str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> dict[str, Any]:
    """Parses ``schedd GROUP-OPTIONS COMMAND ARGS`` as the real CLI would under ``env``;
    returns the command's parameters. A flag that does not exist, a bad value or a missing
    required option raises a click error."""
    at = next((i for i, word in enumerate(argv) if word in ("node", "worker")), None)
    assert at is not None, f"no node or worker command in {argv}"
    name, args = argv[at], argv[at + 1 :]
    # The group's own options (--log-level) come before the command.
    click.Command("schedd", params=schedd_cli.params).make_context("schedd", argv[:at])
    for key in list(os.environ):
        if key.startswith("SCHEDD_"):
            monkeypatch.delenv(key)
    for key, value in _existing_paths(name, env, tmp_path).items():
        monkeypatch.setenv(key, value)
    ctx = _command(name).make_context(name, args)
    return dict(ctx.params, command=name)


def test_parse_catches_an_unknown_flag(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    with pytest.raises(click.NoSuchOption):
        _parse(["node", "--no-such-flag", "1"], {}, monkeypatch, tmp_path)
    with pytest.raises(click.BadParameter):
        _parse(["node", "--partitions", "0"], {}, monkeypatch, tmp_path)


# -- systemd ---------------------------------------------------------------------------------


def _unit(path: Path) -> dict[str, list[tuple[str, str]]]:
    """A unit file as section -> [(key, value)] in order (keys may repeat)."""
    sections: dict[str, list[tuple[str, str]]] = {}
    current: list[tuple[str, str]] | None = None
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("[") and line.endswith("]"):
            current = sections.setdefault(line[1:-1], [])
            continue
        assert current is not None, f"{path.name}: {line!r} before any section"
        key, sep, value = line.partition("=")
        assert sep, f"{path.name}: {line!r} is not KEY=VALUE"
        current.append((key.strip(), value.strip()))
    return sections


def _one(unit: dict[str, list[tuple[str, str]]], section: str, key: str) -> str:
    values = [v for k, v in unit[section] if k == key]
    assert len(values) == 1, f"{key} in [{section}]: {values}"
    return values[0]


def _env_file(path: Path, *, commented: bool = False) -> dict[str, str]:
    """``KEY=VALUE`` lines; with ``commented``, the commented-out ones (``#KEY=VALUE``, the
    alternatives an example offers) instead."""
    env: dict[str, str] = {}
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if commented:
            if not re.match(r"#[A-Z][A-Z0-9_]*=", line):
                continue
            line = line[1:]
        elif not line or line.startswith("#"):
            continue
        key, sep, value = line.partition("=")
        assert sep and re.fullmatch(r"[A-Z][A-Z0-9_]*", key), f"{path.name}: {line!r}"
        env[key] = value
    return env


def _exec_argv(exec_start: str, instance: str, env: Mapping[str, str]) -> list[str]:
    """ExecStart as systemd runs it: specifiers filled in, ``${VAR}`` one word, ``$VAR``
    split on whitespace (systemd.service(5), "Command lines")."""
    line = exec_start.replace("%i", instance).replace("%H", "host-1").replace("%%", "%")
    words: list[str] = []
    for word in shlex.split(line):
        if m := re.fullmatch(r"\$([A-Z_][A-Z0-9_]*)", word):
            words += env.get(m.group(1), "").split()
        else:
            words.append(re.sub(r"\$\{([A-Z_][A-Z0-9_]*)\}", lambda g: env[g.group(1)], word))
    return words


def _timeout_s(value: str) -> float:
    m = re.fullmatch(r"(\d+)(s|min)?", value)
    assert m, value
    return int(m.group(1)) * (60 if m.group(2) == "min" else 1)


NODE_STOP_BUDGET_S = NodeConfig.stop_timeout_s + NodeConfig.server_grace_s
WORKER_STOP_BUDGET_S = (
    WorkerConfig.shutdown_timeout_s
    + WorkerConfig.cancel_timeout_s
    + WorkerConfig.stream_close_timeout_s
)


def test_node_unit_runs_a_node_with_real_flags(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    unit = _unit(SYSTEMD / "schedd-node@.service")
    env = _env_file(SYSTEMD / "node.env.example") | _env_file(SYSTEMD / "node-node-1.env.example")
    alternatives = _env_file(SYSTEMD / "node.env.example", commented=True)
    assert {"SCHEDD_ETCD_CA", "SCHEDD_ETCD_CERT", "SCHEDD_ETCD_KEY"} <= set(alternatives)
    for names in (set(env), set(alternatives)):
        assert names - GROUP_ENV <= _envvars("node"), "a variable no `schedd node` option reads"
    files = [v for k, v in unit["Service"] if k == "EnvironmentFile"]
    assert files == ["/etc/schedd/node.env", "-/etc/schedd/node-%i.env"]

    argv = _exec_argv(_one(unit, "Service", "ExecStart"), "node-1", env)
    assert argv[0] == SCHEDD_BIN
    params = _parse(argv[1:], env, monkeypatch, tmp_path)
    assert params["command"] == "node"
    assert params["node_id"] == "node-1"  # the instance name is the node id
    assert params["data_dir"] == "/var/lib/schedd/node-1"
    assert _one(unit, "Service", "StateDirectory") == "schedd/%i"  # the data dir, created
    assert params["etcd_endpoints"] == env["SCHEDD_ETCD"]
    assert params["advertise"] == "node-1.internal:7070"
    assert params["etcd_ca"] is None  # TLS is the commented alternative
    with_tls = _parse(argv[1:], env | alternatives, monkeypatch, tmp_path)
    assert with_tls["etcd_ca"] and with_tls["etcd_cert"] and with_tls["etcd_key"]
    # With TLS and several endpoints, the name the member certificates share.
    assert "," in with_tls["etcd_endpoints"] and with_tls["etcd_server_name"]
    assert _timeout_s(_one(unit, "Service", "TimeoutStopSec")) > NODE_STOP_BUDGET_S
    assert _one(unit, "Service", "KillSignal") == "SIGTERM"


def test_single_machine_unit_runs_a_node_on_the_embedded_store(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    unit = _unit(SYSTEMD / "schedd-single.service")
    env = _env_file(SYSTEMD / "single.env.example")
    alternatives = _env_file(SYSTEMD / "single.env.example", commented=True)
    for names in (set(env), set(alternatives)):
        assert names - GROUP_ENV <= _envvars("node"), "a variable no `schedd node` option reads"
    assert [v for k, v in unit["Service"] if k == "EnvironmentFile"] == ["/etc/schedd/single.env"]
    argv = _exec_argv(_one(unit, "Service", "ExecStart"), "", env)
    assert argv[0] == SCHEDD_BIN
    params = _parse(argv[1:], env, monkeypatch, tmp_path)
    assert params["command"] == "node"
    assert params["store"] == "rocksdb:/var/lib/schedd/store"
    assert params["etcd_endpoints"] is None
    assert params["data_dir"] == "/var/lib/schedd/node"
    # Both live in the state directory systemd creates.
    assert _one(unit, "Service", "StateDirectory") == "schedd"
    assert _timeout_s(_one(unit, "Service", "TimeoutStopSec")) > NODE_STOP_BUDGET_S
    assert _one(unit, "Service", "KillSignal") == "SIGTERM"


def test_worker_unit_runs_a_worker_with_real_flags(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    unit = _unit(SYSTEMD / "schedd-worker@.service")
    env = _env_file(SYSTEMD / "worker.env.example")
    read_by_schedd = {k for k in env if k.startswith("SCHEDD_")} - {"SCHEDD_WORKER_ARGS"}
    assert read_by_schedd - GROUP_ENV <= _envvars("worker")
    argv = _exec_argv(_one(unit, "Service", "ExecStart"), "2", env)
    assert argv[0] == SCHEDD_BIN
    params = _parse(argv[1:], env, monkeypatch, tmp_path)
    assert params["command"] == "worker"
    assert params["worker_id"] == "host-1-2"
    assert params["data_dir"] == "/var/lib/schedd-worker/2"
    assert _one(unit, "Service", "StateDirectory") == "schedd-worker/%i"
    assert params["imports"] == ("mycompany.handlers",)
    assert params["connect"] == (env["SCHEDD_CONNECT"],)
    assert params["capacity"] == 32
    assert _timeout_s(_one(unit, "Service", "TimeoutStopSec")) > WORKER_STOP_BUDGET_S


def test_etcd_env_names_real_etcd_flags() -> None:
    env = _env_file(SYSTEMD / "etcd.env.example")
    assert all(k.startswith("ETCD_") for k in env)
    for key in ("ETCD_MAX_TXN_OPS", "ETCD_AUTO_COMPACTION_MODE", "ETCD_AUTO_COMPACTION_RETENTION"):
        assert key in env
    # The node's default transaction size must fit etcd's limit.
    assert int(env["ETCD_MAX_TXN_OPS"]) >= NodeConfig.txn_items
    unit = _unit(SYSTEMD / "etcd.service")
    assert _one(unit, "Service", "ExecStart") == "/usr/bin/etcd"  # settings only from ETCD_*
    etcd = shutil.which("etcd")
    if etcd is None:
        pytest.skip("etcd not on PATH: flag names not checked")
    help_text = subprocess.run(
        [etcd, "--help"], capture_output=True, text=True, check=False, timeout=30
    )
    flags = set(re.findall(r"--([a-z0-9-]+)", help_text.stdout + help_text.stderr))
    unknown = [k for k in env if k.removeprefix("ETCD_").lower().replace("_", "-") not in flags]
    assert unknown == [], f"not etcd flags: {unknown}"


def _verify_units(tmp_path: Path) -> Iterator[tuple[str, subprocess.CompletedProcess[str]]]:
    """``systemd-analyze verify`` on copies whose binaries exist on this machine."""
    analyze = shutil.which("systemd-analyze")
    schedd = Path(sys.executable).parent / "schedd"
    etcd = shutil.which("etcd") or shutil.which("true")
    if analyze is None or etcd is None or not schedd.exists():
        pytest.skip("systemd-analyze (or a schedd/etcd binary to stand in) not available")
    for unit in SYSTEMD.glob("*.service"):
        text = unit.read_text().replace(SCHEDD_BIN, str(schedd)).replace("/usr/bin/etcd", etcd)
        (tmp_path / unit.name).write_text(text)
    for name in (
        "schedd-node@node-1.service",
        "schedd-single.service",
        "schedd-worker@1.service",
        "etcd.service",
    ):
        result = subprocess.run(
            [analyze, "verify", f"./{name}"],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            check=False,
            timeout=60,
        )
        yield name, result


def test_units_pass_systemd_analyze_verify(tmp_path: Path) -> None:
    checked = 0
    for name, result in _verify_units(tmp_path):
        # verify exits 0 on unknown keys too: anything it says is a finding.
        assert result.returncode == 0 and result.stderr.strip() == "", (name, result.stderr)
        checked += 1
    assert checked == 4


# -- Kubernetes ------------------------------------------------------------------------------


def _objects() -> list[dict[str, Any]]:
    objects: list[dict[str, Any]] = []
    for path in sorted(K8S.glob("*.yaml")):
        if path.name == "kustomization.yaml":
            continue
        objects += [o for o in yaml.safe_load_all(path.read_text()) if o]
    return objects


def _get(kind: str, name: str) -> dict[str, Any]:
    found = [o for o in _objects() if o["kind"] == kind and o["metadata"]["name"] == name]
    assert len(found) == 1, f"{kind}/{name}: {len(found)} found"
    return found[0]


def _matches(selector: Mapping[str, str], labels: Mapping[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


def _container_env(pod: dict[str, Any], container: dict[str, Any]) -> dict[str, str]:
    """The container's environment: ConfigMaps it reads, then its own entries (fieldRefs as
    placeholders named after the field)."""
    env: dict[str, str] = {}
    for source in container.get("envFrom", []):
        env |= _get("ConfigMap", source["configMapRef"]["name"])["data"]
    for item in container.get("env", []):
        if "value" in item:
            env[item["name"]] = str(item["value"])
        else:
            field = item["valueFrom"]["fieldRef"]["fieldPath"]
            env[item["name"]] = {"metadata.name": "pod-0", "metadata.namespace": "ns"}[field]
    return env


def _k8s_argv(container: dict[str, Any], env: Mapping[str, str]) -> list[str]:
    """command + args with ``$(VAR)`` expanded as the kubelet does; every one must be
    defined."""
    words = [*container.get("command", []), *container.get("args", [])]
    out: list[str] = []
    for word in words:
        for ref in re.findall(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", word):
            assert ref in env, f"$({ref}) is not in the container's env"
        out.append(re.sub(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", lambda m: env[m.group(1)], word))
    return out


def test_kustomization_lists_every_manifest() -> None:
    kustomization = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    files = {p.name for p in K8S.glob("*.yaml")} - {"kustomization.yaml"}
    assert set(kustomization["resources"]) == files


def test_nodes_are_a_statefulset_with_stable_ids(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    sts = _get("StatefulSet", "schedd-node")
    headless = _get("Service", sts["spec"]["serviceName"])
    assert headless["spec"]["clusterIP"] == "None"
    assert headless["spec"]["publishNotReadyAddresses"] is True
    pod = sts["spec"]["template"]
    labels = pod["metadata"]["labels"]
    assert _matches(sts["spec"]["selector"]["matchLabels"], labels)
    assert _matches(headless["spec"]["selector"], labels)
    assert _matches(_get("Service", "schedd")["spec"]["selector"], labels)
    pdb = _get("PodDisruptionBudget", "schedd-node")
    assert _matches(pdb["spec"]["selector"]["matchLabels"], labels)
    assert pdb["spec"]["maxUnavailable"] == 1

    (container,) = pod["spec"]["containers"]
    env = _container_env(pod, container)
    assert set(env) - {"POD_NAME", "POD_NAMESPACE"} - GROUP_ENV <= _envvars("node")
    argv = _k8s_argv(container, env)
    assert argv[0] == "schedd"
    assert "--node-id=$(POD_NAME)" in container["args"]  # the pod name is the node id
    params = _parse(argv[1:], env, monkeypatch, tmp_path)
    assert params["node_id"] == "pod-0"
    host, _, port = params["advertise"].rpartition(":")
    assert host.startswith(f"pod-0.{headless['metadata']['name']}.ns.svc")
    (grpc_port,) = container["ports"]
    assert int(port) == grpc_port["containerPort"] == int(params["listen"].rpartition(":")[2])
    assert {p["targetPort"] for p in headless["spec"]["ports"]} == {grpc_port["name"]}

    # Readiness follows etcd (gRPC health), liveness does not (TCP).
    assert container["readinessProbe"]["grpc"]["port"] == grpc_port["containerPort"]
    assert container["livenessProbe"]["tcpSocket"]["port"] in ("grpc", 7070)
    assert pod["spec"]["terminationGracePeriodSeconds"] > NODE_STOP_BUDGET_S

    # The TLS files the ConfigMap names are in the mounted Secret.
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    tls_dir = mounts["etcd-tls"]
    assert volumes["etcd-tls"]["secret"]["secretName"] == "schedd-etcd-tls"
    for key in ("SCHEDD_ETCD_CA", "SCHEDD_ETCD_CERT", "SCHEDD_ETCD_KEY"):
        assert Path(env[key]).parent == Path(tls_dir), key
    assert "," not in params["etcd_endpoints"]  # with TLS, one endpoint (a Service)
    # The data dir is the persistent volume.
    (claim,) = sts["spec"]["volumeClaimTemplates"]
    assert mounts[claim["metadata"]["name"]] == params["data_dir"]


def test_workers_are_a_deployment_that_reaches_the_nodes(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    deploy = _get("Deployment", "schedd-worker")
    pod = deploy["spec"]["template"]
    labels = pod["metadata"]["labels"]
    assert _matches(deploy["spec"]["selector"]["matchLabels"], labels)
    pdb = _get("PodDisruptionBudget", "schedd-worker")
    assert _matches(pdb["spec"]["selector"]["matchLabels"], labels)
    nodes = _get("StatefulSet", "schedd-node")["spec"]["template"]["metadata"]["labels"]
    assert not _matches(pdb["spec"]["selector"]["matchLabels"], nodes)

    (container,) = pod["spec"]["containers"]
    env = _container_env(pod, container)
    assert set(env) - {"POD_NAME"} - GROUP_ENV <= _envvars("worker")
    argv = _k8s_argv(container, env)
    params = _parse(argv[1:], env, monkeypatch, tmp_path)
    assert params["command"] == "worker"
    assert params["worker_id"] == "pod-0"
    assert params["imports"]
    (connect,) = params["connect"]
    service_name, _, port = connect.rpartition(":")
    service = _get("Service", service_name)
    assert int(port) in {p["port"] for p in service["spec"]["ports"]}
    assert _matches(service["spec"]["selector"], nodes)
    mounts = {m["mountPath"] for m in container["volumeMounts"]}
    assert params["data_dir"] in mounts
    assert pod["spec"]["terminationGracePeriodSeconds"] > WORKER_STOP_BUDGET_S

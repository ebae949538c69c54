"""Every YAML file in cluster/k8s parses, and the autoscaling components agree with the
base, the code and each other.

The worker Deployment's command is parsed by the real ``schedd worker`` click command, its
grace period covers the stop the flags it passes set (held work handed back at once, running
work drained, cancelled, reported), the scrape annotations name the ports the processes
serve /metrics on, the HPA and the ScaledObject scale that Deployment, and every metric
they (and the Prometheus adapter's rules) read is one the code exports (the real-process
test ``test_worker_sigterm_handover`` scrapes them from running processes). With kubectl
and promtool on the PATH, each component is rendered with the base, and each query parsed.
"""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from unit.test_deployment_files import _container_env, _get, _k8s_argv, _parse

from schedd.worker import WorkerConfig

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "cluster" / "k8s"
COMPONENTS = ("autoscale-hpa", "autoscale-keda")
METRIC = re.compile(r"\bschedd_[a-z0-9_]+\b")


def _docs(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d is not None]


def _component(name: str) -> list[dict[str, Any]]:
    kust = yaml.safe_load((K8S / name / "kustomization.yaml").read_text())
    return [o for f in kust["resources"] for o in _docs(K8S / name / f)]


def _one(objects: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    (found,) = [o for o in objects if o["kind"] == kind]
    return found


def _exported_metrics() -> set[str]:
    """Every ``schedd_*`` string constant in the package's source (metric names are given
    whole where they are registered)."""
    names: set[str] = set()
    for path in (ROOT / "src" / "schedd").rglob("*.py"):
        if "/v1/" in str(path):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            value = node.value if isinstance(node, ast.Constant) else None
            if isinstance(value, str) and re.fullmatch(r"schedd_[a-z0-9_]+", value):
                names.add(value)
    return names


def test_every_yaml_file_parses_into_objects_with_a_kind() -> None:
    files = sorted(K8S.rglob("*.yaml"))
    assert len(files) >= 9
    for path in files:
        for doc in _docs(path):
            assert doc.get("apiVersion") and doc.get("kind"), path
            for key, value in (doc.get("data") or {}).items():
                if key.endswith((".yaml", ".yml")):
                    assert isinstance(yaml.safe_load(value), dict), f"{path}: data.{key}"


def test_components_scale_the_worker_deployment_and_drop_its_replicas() -> None:
    deploy = _get("Deployment", "schedd-worker")
    assert deploy["spec"]["replicas"] >= 1  # the base alone: a fixed count
    base = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    assert "components" not in base  # opt-in: both at once would fight
    for name in COMPONENTS:
        kust = yaml.safe_load((K8S / name / "kustomization.yaml").read_text())
        assert kust["kind"] == "Component"
        (patch,) = kust["patches"]
        assert patch["target"]["kind"] == "Deployment"
        assert patch["target"]["name"] == deploy["metadata"]["name"]
        assert yaml.safe_load(patch["patch"]) == [{"op": "remove", "path": "/spec/replicas"}]
        for obj in _component(name):
            ref = obj.get("spec", {}).get("scaleTargetRef")
            if ref is not None:
                assert (ref["kind"], ref["name"]) == ("Deployment", deploy["metadata"]["name"])
                assert ref["apiVersion"] == deploy["apiVersion"]
    hpa = _one(_component("autoscale-hpa"), "HorizontalPodAutoscaler")
    keda = _one(_component("autoscale-keda"), "ScaledObject")
    assert hpa["apiVersion"] == "autoscaling/v2" and keda["apiVersion"] == "keda.sh/v1alpha1"
    assert 1 <= hpa["spec"]["minReplicas"] <= hpa["spec"]["maxReplicas"]
    assert 1 <= keda["spec"]["minReplicaCount"] <= keda["spec"]["maxReplicaCount"]
    # Both scale on the same target per worker.
    (metric,) = hpa["spec"]["metrics"]
    (trigger,) = keda["spec"]["triggers"]
    assert metric["external"]["target"]["averageValue"] == trigger["metadata"]["threshold"]


def _queries() -> dict[str, str]:
    """Each PromQL query the components hold (the adapter's templates filled in)."""
    out: dict[str, str] = {}
    keda = _one(_component("autoscale-keda"), "ScaledObject")
    for i, trigger in enumerate(keda["spec"]["triggers"]):
        assert trigger["type"] == "prometheus"
        out[f"keda trigger {i}"] = trigger["metadata"]["query"]
    adapter = _one(_component("autoscale-hpa"), "ConfigMap")
    config = yaml.safe_load(adapter["data"]["config.yaml"])
    for i, rule in enumerate(config["externalRules"]):
        (series,) = METRIC.findall(rule["seriesQuery"])
        assert rule["name"]["as"] == series and re.fullmatch(rule["name"]["matches"], series)
        assert rule["resources"]["overrides"]["namespace"]["resource"] == "namespace"
        filled = rule["metricsQuery"].replace("<<.Series>>", series)
        out[f"adapter rule {i}"] = filled.replace("<<.LabelMatchers>>", 'queue="default"')
        out[f"adapter series {i}"] = rule["seriesQuery"]
    return out


def autoscaler_metrics() -> set[str]:
    """Every metric name the autoscaling components read (the real-process test
    ``test_worker_sigterm_handover`` finds each on a node's or worker's /metrics)."""
    hpa = _one(_component("autoscale-hpa"), "HorizontalPodAutoscaler")
    used = {m["external"]["metric"]["name"] for m in hpa["spec"]["metrics"]}
    return used | {n for q in _queries().values() for n in METRIC.findall(q)}


def test_every_metric_the_autoscalers_read_is_exported_with_a_queue_label() -> None:
    exported = _exported_metrics()
    assert {"schedd_queue_depth", "schedd_queue_free_slots", "schedd_queue_slots"} <= exported
    hpa = _one(_component("autoscale-hpa"), "HorizontalPodAutoscaler")
    used: set[str] = set()
    for m in hpa["spec"]["metrics"]:
        assert m["type"] == "External"
        used.add(m["external"]["metric"]["name"])
        assert set(m["external"]["metric"]["selector"]["matchLabels"]) == {"queue"}
    served = {n for q in _queries().values() for n in METRIC.findall(q)}
    for query in _queries().values():
        assert "queue" in query  # per queue, never all queues' work summed
    assert used <= served  # the HPA reads a metric the adapter serves
    assert used | served <= exported
    docs = (ROOT / "docs" / "operations.md").read_text()
    undocumented = [n for n in used | served if not re.search(f"`{n}[{{`]", docs)]
    assert undocumented == []


def test_queries_are_valid_promql(tmp_path: Path) -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool not on PATH")
    rules = [
        {"record": f"check:{i}", "expr": q}
        for i, q in enumerate(q for k, q in _queries().items() if "series" not in k)
    ]
    path = tmp_path / "queries.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "check", "rules": rules}]}))
    out = subprocess.run(
        [promtool, "check", "rules", str(path)],
        capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr


def test_worker_command_grace_period_and_scrape_ports_match_the_code(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    deploy = _get("Deployment", "schedd-worker")
    pod = deploy["spec"]["template"]
    (container,) = pod["spec"]["containers"]
    argv = _k8s_argv(container, _container_env(pod, container))
    assert argv[0] == "schedd"
    params = _parse(argv[1:], _container_env(pod, container), monkeypatch, tmp_path)
    assert params["command"] == "worker"
    # SIGTERM's whole stop: running work gets --shutdown-timeout, cancelled work up to the
    # cancel timeout to report, each stream the close timeout. No preStop hook delays it.
    stop_s = (
        params["shutdown_timeout"]
        + WorkerConfig.cancel_timeout_s
        + WorkerConfig.stream_close_timeout_s
    )
    assert pod["spec"]["terminationGracePeriodSeconds"] > stop_s
    assert "lifecycle" not in container
    annotations = pod["metadata"]["annotations"]
    assert annotations["prometheus.io/scrape"] == "true"
    assert params["metrics_listen"].rpartition(":")[2] == annotations["prometheus.io/port"]
    node = _get("StatefulSet", "schedd-node")["spec"]["template"]
    (node_container,) = node["spec"]["containers"]
    node_args = _k8s_argv(node_container, _container_env(node, node_container))
    node_params = _parse(node_args[1:], _container_env(node, node_container), monkeypatch, tmp_path)
    port = node["metadata"]["annotations"]["prometheus.io/port"]
    assert node_params["metrics_listen"].rpartition(":")[2] == port


@pytest.mark.parametrize("component", COMPONENTS)
def test_kustomize_renders_the_base_with_each_component(component: str, tmp_path: Path) -> None:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl not on PATH")
    copy = tmp_path / "k8s"
    shutil.copytree(K8S, copy)
    kust = yaml.safe_load((copy / "kustomization.yaml").read_text())
    kust["components"] = [component]
    (copy / "kustomization.yaml").write_text(yaml.safe_dump(kust))
    out = subprocess.run(
        [kubectl, "kustomize", str(copy)], capture_output=True, text=True, timeout=60, check=False
    )
    assert out.returncode == 0, out.stderr
    objects = [d for d in yaml.safe_load_all(out.stdout) if d]
    deploy = next(o for o in objects if o["kind"] == "Deployment")
    assert "replicas" not in deploy["spec"]
    sts = next(o for o in objects if o["kind"] == "StatefulSet")
    assert sts["spec"]["replicas"] == 3  # the nodes are not autoscaled
    kinds = {o["kind"] for o in objects}
    assert ("HorizontalPodAutoscaler" in kinds) == (component == "autoscale-hpa")
    assert ("ScaledObject" in kinds) == (component == "autoscale-keda")

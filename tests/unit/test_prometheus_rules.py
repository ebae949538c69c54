"""The Prometheus files in cluster/prometheus are valid and their alert rules behave.

``promtool`` (Debian's ``prometheus`` package, installed by ``make etcd``) checks the scrape
config and the rules and runs the rule unit tests of ``alerts_test.yml``. Without promtool the
tests are skipped, except under CI (the ``CI`` environment variable set), where they fail.
What every alert must carry (a ``for:``, a severity label, a summary and a description saying
where to look) and that each one has a firing case in ``alerts_test.yml`` are checked with
plain YAML, so they hold without promtool too.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
PROM = ROOT / "cluster" / "prometheus"
ALERTS = {
    "SchedNodeDown",
    "SchedNodeNotFiring",
    "SchedLatenessHigh",
    "SchedFireDelayHigh",
    "SchedDeadLettersGrowing",
    "SchedExecutionsWithoutWorker",
    "SchedStoreRejectedWrites",
    "SchedEtcdErrors",
    "SchedLeaseKeepaliveFailing",
    "SchedPartitionsUnowned",
    "SchedClockSkew",
    "SchedDispatchBacklog",
    "SchedOwnershipFlapping",
}
SEVERITIES = {"critical", "warning"}


@pytest.fixture(scope="module")
def promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        message = (
            "promtool is not on PATH: install Debian's `prometheus` package "
            "(make etcd does it) to check cluster/prometheus"
        )
        if "CI" in os.environ:
            pytest.fail(f"{message} (CI is set: a missing promtool fails rather than skips)")
        pytest.skip(message)
    return path


def _promtool(promtool: str, *args: str) -> None:
    """Runs ``promtool ARGS`` in cluster/prometheus (where rule_files resolve); exit 0 or fail
    with everything it printed."""
    result = subprocess.run(
        [promtool, *args],
        cwd=PROM,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert result.returncode == 0, (
        f"promtool {' '.join(args)} exited {result.returncode}\n"
        f"--- stdout\n{result.stdout}\n--- stderr\n{result.stderr}"
    )


def _load(name: str) -> Any:
    return yaml.safe_load((PROM / name).read_text())


def test_promtool_check_config(promtool: str) -> None:
    _promtool(promtool, "check", "config", "prometheus.yml")


def test_promtool_check_rules(promtool: str) -> None:
    _promtool(promtool, "check", "rules", "alerts.yml")


def test_promtool_test_rules(promtool: str) -> None:
    _promtool(promtool, "test", "rules", "alerts_test.yml")


def test_scrape_config_jobs() -> None:
    config = _load("prometheus.yml")
    assert config["global"]["scrape_interval"] == "15s"
    assert config["rule_files"] == ["alerts.yml"]
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    assert set(jobs) == {"schedd-node", "schedd-worker"}
    targets = {
        name: [t for static in job["static_configs"] for t in static["targets"]]
        for name, job in jobs.items()
    }
    assert len(targets["schedd-node"]) == 3
    assert len(targets["schedd-worker"]) == 2


def _rules() -> list[dict[str, Any]]:
    return [rule for group in _load("alerts.yml")["groups"] for rule in group["rules"]]


def test_every_alert_says_how_long_how_bad_and_where_to_look() -> None:
    rules = _rules()
    names = [rule["alert"] for rule in rules]
    assert sorted(names) == sorted(ALERTS)
    for rule in rules:
        name = rule["alert"]
        assert rule.get("for"), f"{name} has no for:"
        assert rule.get("labels", {}).get("severity") in SEVERITIES, f"{name}: severity"
        annotations = rule.get("annotations", {})
        assert annotations.get("summary"), f"{name} has no summary"
        assert annotations.get("description"), f"{name} has no description"


def test_every_alert_is_unit_tested_firing() -> None:
    fired: set[str] = set()
    for case in _load("alerts_test.yml")["tests"]:
        for check in case.get("alert_rule_test", []):
            if check.get("exp_alerts"):
                fired.add(check["alertname"])
    assert fired == ALERTS

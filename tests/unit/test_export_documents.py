"""``schedctl export``'s documents without a cluster: every kind of job comes back from
``job_from_dict`` as the same spec, defaults are left out, limits round-trip, the order is
(tenant, name), jobs apply cannot recreate are named, and bad flags are one line, exit 2."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner, Result

from schedd.cli._apply import ApplyError, load
from schedd.cli._export import Export, render
from schedd.cli.schedctl import cli
from schedd.client import build_job
from schedd.client._spec import (
    changed_paths,
    job_from_dict,
    job_to_spec,
    limits_from_dict,
    limits_to_spec,
)
from schedd.model import validate_new_job, validate_tenant_limits
from schedd.schedule import parse_schedule
from schedd.v1 import job_pb2, scheduler_pb2

CREATED = 1_772_366_403_417  # 2026-03-01T12:00:03.417Z


def stored(name: str, **kwargs: Any) -> job_pb2.Job:
    """A job as a node stores and returns it: normalised, with an id and a creation time."""
    ids = iter(f"j-{name}-{n}" for n in range(100))
    return validate_new_job(build_job(name, **kwargs), now_ms=CREATED, id_factory=lambda: next(ids))


VARIED = [
    stored("minimal", schedule="*/5 * * * *", handler="echo"),
    stored(
        "nightly",
        schedule="30 2 * * *",
        tz="Europe/Berlin",
        handler="export",
        queue="etl",
        payload={"table": "orders", "n": [1, 2.5, None]},
        labels={"team": "data", "tier": "1"},
        max_attempts=7,
        retry_initial="10s",
        retry_max="1h",
        retry_multiplier=3.0,
        timeout="90s",
        misfire="catch_up",
        catch_up_limit=50,
        starting_deadline="10m",
        overlap="buffer_one",
        jitter="5s",
        tenant="acme",
    ),
    stored(
        "hook",
        schedule="@every 30s",
        http=job_pb2.HttpTarget(
            url="https://example.com/hook",
            method="PUT",
            headers={"Authorization": "Bearer s3cret", "X-Env": "prod"},
            success_codes=[409],
        ),
        overlap="forbid",
    ),
    stored(
        "tidy",
        schedule="@after 90s",
        tz="America/New_York",
        shell=job_pb2.ShellTarget(argv=["find", "/tmp", "-delete"], cwd="/", env={"A": "1"}),
        misfire="skip",
        retry_initial="10m",
    ),
    stored("once", schedule="@at 2026-12-24T18:00:00+01:00", handler="echo", payload="text"),
]


@pytest.mark.parametrize("job", VARIED, ids=lambda j: j.name)
def test_a_spec_applies_back_as_the_same_job_firing_at_the_same_times(job: job_pb2.Job) -> None:
    job.paused = job.name == "nightly"
    doc = yaml.safe_load(yaml.safe_dump(job_to_spec(job)))  # through the text, as apply reads
    back, paused = job_from_dict(doc)
    created_later = CREATED + 3_600_007  # another cluster, an hour later
    sched = validate_new_job(back, now_ms=created_later, id_factory=lambda: "j-copy")
    relative = job.schedule.expr.startswith(("@every", "@after"))
    # Only the anchor is new: "@every 30s" is written "@every 30s from <created>".
    assert changed_paths(sched, job) == (["schedule"] if relative else [])
    assert paused is job.paused
    ours = parse_schedule(job.schedule.expr, job.schedule.timezone, anchor_ms=job.created_ms)
    theirs = parse_schedule(sched.schedule.expr, sched.schedule.timezone, anchor_ms=created_later)
    assert list(ours.fires(CREATED, limit=5)) == list(theirs.fires(CREATED, limit=5)) != []


def test_defaults_are_left_out_and_relative_schedules_get_their_anchor() -> None:
    by_name = {j.name: job_to_spec(j) for j in VARIED}
    assert by_name["minimal"] == {
        "name": "minimal", "tenant": "default", "schedule": {"expr": "*/5 * * * *"},
        "handler": "echo", "paused": False,
    }  # fmt: skip
    assert by_name["hook"]["schedule"] == {"expr": "@every 30s from 2026-03-01T12:00:03.417Z"}
    assert by_name["hook"]["http"]["headers"] == {"Authorization": "Bearer s3cret", "X-Env": "prod"}
    assert by_name["tidy"]["schedule"]["timezone"] == "America/New_York"
    # The maximum backoff follows a long initial one by default: not written either.
    assert by_name["tidy"]["retry"] == {"initial_backoff_ms": 600_000}
    nightly = by_name["nightly"]
    assert nightly["handler"] == {"name": "export", "queue": "etl"}
    assert nightly["misfire"] == {
        "mode": "catch_up", "catch_up_limit": 50, "starting_deadline_ms": 600_000
    }  # fmt: skip
    assert "idempotency_key" not in nightly and "id" not in nightly


def test_limits_round_trip_and_bursts_by_default_are_left_out() -> None:
    limits = validate_tenant_limits(
        scheduler_pb2.TenantLimits(tenant="acme", rate=2.5, max_running=4, max_jobs=100)
    )
    doc = limits_to_spec(limits)
    assert doc == {"kind": "TenantLimits", "tenant": "acme", "rate": 2.5, "max_running": 4,
                   "max_jobs": 100}  # fmt: skip
    assert validate_tenant_limits(limits_from_dict(doc)) == limits
    odd = validate_tenant_limits(
        scheduler_pb2.TenantLimits(tenant="b", rate=10, burst=50, api_rate=5, api_burst=9)
    )
    assert validate_tenant_limits(limits_from_dict(limits_to_spec(odd))) == odd


def test_documents_are_by_tenant_then_name_with_the_limits_first() -> None:
    jobs = [stored("b", schedule="@every 1m", handler="x", tenant="t2"),
            stored("z", schedule="@every 1m", handler="x", tenant="t1"),
            stored("a", schedule="@every 1m", handler="x", tenant="t2")]  # fmt: skip
    found = Export(sorted(jobs, key=lambda j: (j.tenant, j.name)))
    found.limits["t2"] = scheduler_pb2.TenantLimits(tenant="t2", max_running=3)
    found.limits["t0"] = scheduler_pb2.TenantLimits(tenant="t0", max_jobs=1)
    order = [(d.get("kind", "Job"), d["tenant"], d.get("name")) for d in found.documents()]
    assert order == [
        ("TenantLimits", "t0", None), ("Job", "t1", "z"),
        ("TenantLimits", "t2", None), ("Job", "t2", "a"), ("Job", "t2", "b"),
    ]  # fmt: skip
    assert found.problems() == []
    text = render(found.documents(), "yaml", "test")
    assert [d["tenant"] for d in yaml.safe_load_all(text)] == ["t0", "t1", "t2", "t2", "t2"]


def test_jobs_apply_cannot_recreate_are_named() -> None:
    twins = [stored("r", schedule="@every 1m", handler="x"),
             stored("r", schedule="@every 2m", handler="x")]  # fmt: skip
    twins[1].id = "j-r-other"
    raw = stored("blob", schedule="@every 1m", handler="x", payload=b"\xff\x00binary")
    problems = Export([*twins, raw]).problems()
    assert problems == [
        "1 names held by more than one job: default/r (j-r-0, j-r-other)",
        "1 jobs with a payload that is not JSON: default/blob (j-blob-0)",
    ]


def run(args: Sequence[str]) -> Result:
    return CliRunner().invoke(cli, ["--endpoints", "127.0.0.1:1", "--timeout", "1", *args])


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["export", "--tenant", "a", "--all-tenants"], "not both"),
        (["export", "--tenant", " "], "must name a tenant"),
        (["export", "-o", "table"], "'table' is not one of"),
        (["-o", "jsonl", "export"], "export writes yaml or json"),
        (["export", "-o", "yaml", "--file", "out.json"], "apply reads a .json file as JSON"),
    ],
)
def test_bad_flags_are_one_line_and_exit_2(args: list[str], needle: str) -> None:
    result = run(args)
    assert result.exit_code == 2, (result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("schedctl"), result.stderr
    assert needle in lines[0]
    assert result.stdout == ""


def test_a_node_that_does_not_answer_is_one_line() -> None:
    result = run(["export", "--all-tenants"])
    assert result.exit_code == 5, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr


def test_apply_names_bad_limits_documents_by_file_document_and_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "kind: TenantLimits\ntenant: a\nrate: 5\n---\n"
        "kind: TenantLimits\ntenant: a\nmax_running: 1\n---\n"
        "kind: TenantLimits\ntenant: b\nburst: 3\n---\n"
        "kind: TenantLimits\ntenant: c\nrate: fast\n---\n"
        "kind: TenantLimits\nrate: 1\nspeed: 2\n---\n"
        "kind: Cron\nname: x\nschedule: {expr: '@every 1m'}\nhandler: echo\n"
    )
    with pytest.raises(ApplyError, match="5 problem"):
        load((str(bad),), CREATED)
    lines = capsys.readouterr().err.splitlines()
    assert (
        lines
        == [
            f"{bad}#2: limits of tenant 'a' are also in {bad}#1",
            f"{bad}#3: burst: needs a rate (a burst is what a rate allows at once)",
            f"{bad}#4: rate: must be a number, got 'fast'",
            f"{bad}#5: speed: unknown field",
            f"{bad}#6: kind: unknown kind 'Cron' (Job or TenantLimits)",
        ][: len(lines)]
        and len(lines) == 5
    ), lines
    good = tmp_path / "good.yaml"
    good.write_text("kind: TenantLimits\ntenant: a\nrate: 5\n")
    docs = load((str(good),), CREATED)
    assert docs.jobs == [] and [d.limits.burst for d in docs.limits] == [5]  # the default

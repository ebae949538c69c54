"""schedctl for people who manage many jobs: apply (create, update, unchanged, dry run, round
trip, errors), job describe, run list --watch and the one-line create. Real schedctl
processes against a real node, worker and etcd."""

from __future__ import annotations

import asyncio
import json
import signal
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import yaml

from integration.cluster_harness import Harness, eventually, harness_on
from integration.test_schedctl_e2e import SCHEDCTL, ctl

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(params=["etcd", "rocksdb"])
async def h(
    request: pytest.FixtureRequest, etcd_prefix: bytes, tmp_path: Path
) -> AsyncIterator[Harness]:
    """A node and a worker on each store: apply is a user-facing path."""
    harness = harness_on(request, request.param, etcd_prefix, tmp_path)
    await harness.start_node()
    await harness.start_worker()
    try:
        yield harness
    finally:
        await harness.close()


SPECS = """
name: nightly
schedule: {expr: "30 2 * * *", timezone: Europe/Berlin}
handler: {name: echo}
payload: {table: orders}
labels: {team: data}
---
name: ping
schedule: {expr: "@every 30s"}
http: {url: "https://example.com/hook", method: GET}
retry: {max_attempts: 5}
---
- name: tidy
  tenant: ops
  schedule: {expr: "0 * * * *"}
  shell: {argv: [find, /tmp, -mtime, "+7", -delete]}
"""


async def apply(h: Harness, *args: str) -> tuple[int, list[dict[str, object]], str]:
    code, out, err = await ctl(h, "apply", *args, "-o", "json")
    return code, (json.loads(out) if out.strip() else []), err


async def test_apply_creates_then_changes_nothing_then_updates_what_differs(
    h: Harness, tmp_path: Path
) -> None:
    specs = tmp_path / "jobs.yaml"
    specs.write_text(SPECS)
    code, rows, err = await apply(h, "-f", str(specs))
    assert code == 0, err
    assert [(r["name"], r["tenant"], r["action"]) for r in rows] == [
        ("nightly", "default", "create"),
        ("ping", "default", "create"),
        ("tidy", "ops", "create"),
    ]
    assert "3 job specs: 3 created" in err
    ids = {r["name"]: r["id"] for r in rows}

    code, rows, err = await apply(h, "-f", str(specs))
    assert code == 0, err
    assert {r["action"] for r in rows} == {"unchanged"}, rows
    assert "3 unchanged" in err

    changed = SPECS.replace('"30 2 * * *"', '"45 3 * * *"').replace("team: data", "team: ml")
    changed = changed.replace("retry: {max_attempts: 5}", "retry: {max_attempts: 5}\npaused: true")
    specs.write_text(changed)
    code, rows, err = await apply(h, "-f", str(specs), "--dry-run")
    assert code == 0, err
    plan = {r["name"]: (r["action"], r["changes"]) for r in rows}
    assert plan == {
        "nightly": ("update", ["schedule", "labels"]),
        "ping": ("update", ["paused"]),
        "tidy": ("unchanged", []),
    }
    assert "2 would be updated" in err
    client = await h.connect()
    assert (await client.get_job(ids["nightly"])).schedule.expr == "30 2 * * *"  # dry run

    code, rows, err = await apply(h, "-f", str(specs))
    assert code == 0, err
    nightly = await client.get_job(ids["nightly"])
    assert nightly.schedule.expr == "45 3 * * *" and dict(nightly.labels) == {"team": "ml"}
    assert nightly.schedule.timezone == "Europe/Berlin"
    assert (await client.get_job(ids["ping"])).paused
    code, rows, err = await apply(h, "-f", str(specs))
    assert {r["action"] for r in rows} == {"unchanged"}, rows


async def test_job_get_yaml_applies_unchanged_and_a_directory_of_json_works(
    h: Harness, tmp_path: Path
) -> None:
    client = await h.connect()
    made = await client.create_job(
        "report", schedule="0 9 * * 1-5", tz="America/New_York", handler="echo",
        payload={"b": 2, "a": [1, 2]}, jitter="5s", overlap="forbid", labels={"x": "y"},
    )  # fmt: skip
    code, out, err = await ctl(h, "job", "get", made.job.id, "-o", "yaml")
    assert code == 0, err
    (tmp_path / "report.yaml").write_text(out)
    code, rows, err = await apply(h, "-f", str(tmp_path / "report.yaml"))
    assert code == 0, err
    assert [(r["action"], r["id"]) for r in rows] == [("unchanged", made.job.id)]

    specs = tmp_path / "specs"
    specs.mkdir()
    (specs / "a.json").write_text(json.dumps([
        {"name": "j1", "schedule": {"expr": "@every 1m"}, "handler": "echo"},
        {"name": "j2", "schedule": {"expr": "@every 2m"}, "handler": {"name": "echo"}},
    ]))  # fmt: skip
    (specs / "notes.txt").write_text("not a spec")
    code, rows, err = await apply(h, "-f", str(specs))
    assert code == 0, err
    assert [(r["name"], r["action"]) for r in rows] == [("j1", "create"), ("j2", "create")]


async def test_bad_specs_name_file_document_and_field_and_change_nothing(
    h: Harness, tmp_path: Path
) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "name: good\nschedule: {expr: '@every 1m'}\nhandler: echo\n---\n"
        "name: worse\nschedule: {expr: '61 * * * *'}\nhandler: echo\n---\n"
        "name: typo\nschedul: {expr: '@every 1m'}\nhandler: echo\n---\n"
        "name: twice\nschedule: {expr: '@every 1m'}\nhandler: echo\nhttp: {url: 'http://x'}\n"
    )
    code, out, err = await ctl(h, "apply", "-f", str(bad))
    assert code == 2, (out, err)
    lines = err.strip().splitlines()
    assert any(ln.startswith(f"{bad}#2: schedule.expr") for ln in lines), err
    assert any(ln.startswith(f"{bad}#3: schedul: unknown field") for ln in lines), err
    assert any(ln.startswith(f"{bad}#4: http") for ln in lines), err
    assert "Traceback" not in err
    client = await h.connect()
    assert [j async for j in client.list_jobs()] == []  # not even the good one
    (tmp_path / "broken.yaml").write_text("name: [unclosed\n")
    code, _, err = await ctl(h, "apply", "-f", str(tmp_path / "broken.yaml"))
    assert code == 2 and "broken.yaml: not valid yaml" in err, err
    code, _, err = await ctl(h, "apply", "-f", str(tmp_path / "missing.yaml"))
    assert code == 2 and "no such file" in err, err


async def test_describe_shows_spec_next_fires_runs_and_dead_letters(h: Harness) -> None:
    client = await h.connect()
    tick = (await client.create_job("tick", schedule="@every 1s", handler="echo")).job
    doomed = (
        await client.create_job("doomed", schedule="@after 1s", handler="fail", max_attempts=1)
    ).job
    await eventually(lambda: client.list_dead_letters(job_id=doomed.id), bool, what="a dead letter")
    await eventually(
        lambda: client.list_executions(job_id=tick.id),
        lambda rs: sum(1 for r in rs if r.started_ms) >= 2,
        what="two runs",
    )
    code, out, err = await ctl(h, "job", "describe", tick.id, "-o", "json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["job"]["id"] == tick.id and len(doc["next_fires"]) == 5
    assert doc["next_fires"][0]["utc"].endswith("Z")
    started = [r for r in doc["runs"] if r["started_ms"]]
    assert started and all(r["lateness_ms"] is not None for r in started)
    code, out, err = await ctl(h, "job", "describe", doomed.id)
    assert code == 0, err
    assert "dead letters" in out and "no runs yet" not in out
    code, out, err = await ctl(h, "job", "describe", "nope")
    assert code == 3 and "nope" in err


async def test_run_list_watch_follows_new_runs(h: Harness) -> None:
    client = await h.connect()
    tick = (await client.create_job("tick", schedule="@every 1s", handler="echo")).job
    proc = await asyncio.create_subprocess_exec(
        SCHEDCTL, "--endpoints", h.address(), "run", "list", "--job", tick.id, "--watch",
        "--interval", "0.3", "-o", "jsonl",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert proc.stdout is not None
    seen: set[str] = set()
    try:
        async with asyncio.timeout(30):
            while len({eid for eid in seen}) < 3:
                line = await proc.stdout.readline()
                assert line, (await proc.stderr.read()).decode() if proc.stderr else ""
                row = json.loads(line)
                if row["state"] == "SUCCEEDED":
                    seen.add(row["id"])
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            await asyncio.wait_for(proc.wait(), 15)
        except TimeoutError:
            proc.kill()
            raise
    assert proc.returncode == 0  # Ctrl-C ends a watch


async def test_job_list_watch_ends_quietly_on_ctrl_c(h: Harness) -> None:
    client = await h.connect()
    await client.create_job("watched", schedule="@every 1h", handler="echo")
    proc = await asyncio.create_subprocess_exec(
        SCHEDCTL, "--endpoints", h.address(), "job", "list", "--watch", "--interval", "0.5",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    # Not a terminal: the live table is printed as it stands when the watch ends.
    await asyncio.sleep(2)  # time to start and refresh at least once
    proc.send_signal(signal.SIGINT)
    out, err = await asyncio.wait_for(proc.communicate(), 15)
    assert proc.returncode == 0, err
    assert err.decode().strip() == "", err
    assert b"watched" in out  # no "Aborted!", no traceback


async def test_create_and_update_print_one_line(h: Harness) -> None:
    code, out, err = await ctl(
        h, "job", "create", "daily", "--schedule", "0 9 * * *", "--tz", "Asia/Tokyo",
        "--handler", "echo",
    )  # fmt: skip
    assert code == 0, err
    lines = out.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("created job daily (j-"), out
    assert "next fire " in lines[0] and "Asia/Tokyo" in lines[0] and "Z (" in lines[0]
    job_id = lines[0].split("(")[1].split(")")[0]
    code, out, err = await ctl(h, "job", "update", job_id, "--schedule", "0 10 * * *")
    assert code == 0 and out.startswith(f"updated job daily ({job_id}): next fire "), out
    code, out, err = await ctl(h, "job", "update", job_id, "--name", "renamed", "-o", "yaml")
    assert code == 0 and yaml.safe_load(out)["name"] == "renamed"

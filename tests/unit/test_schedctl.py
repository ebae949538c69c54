"""schedctl through click's CliRunner: output shapes, one-line errors, exit codes."""

from __future__ import annotations

import json
from collections.abc import Sequence

import pytest
import yaml
from click.testing import CliRunner, Result
from test_client_servicer import Served, served

from schedd.cli.schedctl import cli
from schedd.v1 import scheduler_pb2

__all__ = ["served"]


def run(args: Sequence[str], endpoint: str = "127.0.0.1:1") -> Result:
    runner = CliRunner()
    return runner.invoke(cli, ["--endpoints", endpoint, "--timeout", "3", *args])


def assert_one_line_error(result: Result, code: int) -> None:
    assert result.exit_code == code, (result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("schedctl: error:")
    assert "Traceback" not in result.stderr


@pytest.fixture
def schedule_available() -> None:
    pytest.importorskip("schedd.schedule")


def test_preview_json_dst_gap(schedule_available: None) -> None:
    result = run(
        [
            "preview",
            "30 2 * * *",
            "--tz",
            "America/New_York",
            "--after",
            "2026-03-07T12:00:00Z",
            "--count",
            "3",
            "-o",
            "json",
        ]
    )
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)
    assert set(doc) == {"schedule", "tz", "fires"}
    assert (doc["schedule"], doc["tz"]) == ("30 2 * * *", "America/New_York")
    assert len(doc["fires"]) == 3
    gap = doc["fires"][0]  # 2026-03-08 02:30 does not exist in New York: runs at 03:00 EDT
    assert gap == {
        "utc": "2026-03-08T07:00:00Z",
        "local": "2026-03-08T03:00:00-04:00",
        "note": "DST: clocks went forward since the start (UTC-05:00 → UTC-04:00)",
    }
    assert doc["fires"][1]["local"] == "2026-03-09T02:30:00-04:00"
    assert doc["fires"][1]["note"] == ""


def test_preview_table_offline(schedule_available: None) -> None:
    result = run(["preview", "0 9 * * *", "--tz", "Europe/Berlin", "--count", "2"])
    assert result.exit_code == 0, result.stderr
    assert "Europe/Berlin" in result.stdout
    assert result.stdout.count("Z") >= 2


@pytest.mark.parametrize(
    "args",
    [
        ["preview", "not a cron"],
        ["preview", "0 9 * * *", "--tz", "Mars/Olympus"],
        ["preview", "0 9 * * *", "--count", "0"],
        ["preview", "0 9 * * *", "--after", "someday"],
        ["job", "create", "x", "--schedule", "@daily", "--handler", "h", "--timeout", "30 parsecs"],
    ],
)
def test_bad_schedule_input_exit_2(schedule_available: None, args: list[str]) -> None:
    assert_one_line_error(run(args), 2)


@pytest.mark.parametrize(
    "args",
    [
        ["preview", "0 9 * * *", "--count", "0"],
        ["preview", "0 9 * * *", "--after", "someday"],
        ["job", "create", "x", "--schedule", "@daily", "--handler", "h", "--payload", "{nope"],
        ["job", "create", "x", "--schedule", "@daily"],
        ["job", "create", "x", "--schedule", "@daily", "--handler", "h", "--label", "novalue"],
        ["job", "create", "x", "--schedule", "@daily", "--handler", "h", "--misfire", "never"],
        ["job", "list", "-o", "xml"],
        ["-o", "xml", "job", "list"],
        ["job", "get"],
        ["job", "frobnicate"],
        ["run", "list", "--state", "exploded"],
        ["dlq", "redrive"],
        ["job", "update", "j-1"],
        ["job", "trigger", "j-1", "--payload", "[1,"],
    ],
)
def test_bad_local_input_exit_2_nothing_sent(args: list[str]) -> None:
    # Nothing listens on the endpoint: exit 2 (not 5) proves no call was made.
    assert_one_line_error(run(args), 2)


def test_exit_codes_against_the_servicer(served: Served) -> None:
    assert_one_line_error(run(["job", "get", "missing"], served.endpoint), 3)
    assert_one_line_error(run(["run", "get", "missing@1"], served.endpoint), 3)
    assert_one_line_error(
        run(
            ["job", "create", "x", "-s", "@daily", "--handler", "h", "--id", "dup"], served.endpoint
        ),
        4,
    )
    assert_one_line_error(run(["job", "update", "stale", "--name", "n"], served.endpoint), 4)
    assert_one_line_error(run(["job", "pause", "bad"], served.endpoint), 2)


def test_exit_5_when_nothing_listens() -> None:
    result = run(["job", "get", "j-1"])
    assert_one_line_error(result, 5)


def test_exit_5_naming_every_endpoint_when_none_answers() -> None:
    result = CliRunner().invoke(
        cli,
        ["--endpoints", "127.0.0.1:1,127.0.0.1:2", "--endpoint", "127.0.0.1:3", "job", "get", "j"],
    )
    assert_one_line_error(result, 5)
    assert all(f"127.0.0.1:{p}" in result.stderr for p in (1, 2, 3))


def test_repeated_endpoint_skips_a_dead_one(served: Served) -> None:
    args = ["--endpoint", "127.0.0.1:1", "--endpoint", served.endpoint, "job", "get", "j-1"]
    result = CliRunner().invoke(cli, [*args, "-o", "json"])
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["id"] == "j-1"


def test_endpoints_from_env(served: Served) -> None:
    runner = CliRunner(env={"SCHEDCTL_ENDPOINTS": served.endpoint})
    result = runner.invoke(cli, ["job", "get", "j-1", "-o", "json"])
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["id"] == "j-1"


def test_job_create_json_prints_id(served: Served) -> None:
    result = run(
        [
            "job",
            "create",
            "report",
            "--schedule",
            "0 9 * * *",
            "--handler",
            "send_report",
            "--payload",
            '{"to": "ops"}',
            "--label",
            "team=ops",
            "--max-attempts",
            "4",
            "-o",
            "json",
        ],
        served.endpoint,
    )
    assert result.exit_code == 0, result.stderr
    job = json.loads(result.stdout)
    assert job["id"] == "j-new" and job["payload"] == {"to": "ops"}
    sent = served.servicer.last("CreateJob").job
    assert json.loads(sent.payload) == {"to": "ops"} and dict(sent.labels) == {"team": "ops"}
    assert sent.retry.max_attempts == 4


def test_output_before_and_after_subcommand(served: Served) -> None:
    after = run(["job", "get", "j-1", "-o", "yaml"], served.endpoint)
    before = run(["-o", "yaml", "job", "get", "j-1"], served.endpoint)
    assert after.exit_code == before.exit_code == 0
    assert yaml.safe_load(after.stdout)["id"] == "j-1"
    assert after.stdout == before.stdout


def test_run_list_shapes(served: Served) -> None:
    result = run(
        ["run", "list", "--job", "j-1", "--state", "succeeded", "-o", "json"], served.endpoint
    )
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["missing_nodes"] == [] and result.stderr == ""
    runs = doc["executions"]
    assert isinstance(runs, list) and len(runs) == 6
    for key in ("id", "job_id", "scheduled_time", "state", "attempt", "fencing_token"):
        assert key in runs[0]
    assert runs[0]["state"] == "SUCCEEDED"
    jsonl = run(["run", "list", "--limit", "3", "-o", "jsonl"], served.endpoint)
    lines = jsonl.stdout.strip().splitlines()
    assert len(lines) == 3 and all(json.loads(line)["job_id"] == "j-1" for line in lines)
    table = run(["run", "list"], served.endpoint)
    assert table.exit_code == 0 and "SUCCEEDED" in table.stdout


def test_tables_and_other_commands(served: Served) -> None:
    for args in (
        ["job", "list"],
        ["job", "get", "j-1"],
        ["job", "pause", "j-1"],
        ["job", "resume", "j-1"],
        ["job", "trigger", "j-1", "--payload", "{}"],
        ["job", "trigger", "j-1", "--idempotency-key", "order-42"],
        ["job", "backfill", "j-1", "--start", "2026-03-01T00:00:00Z", "--end", "2026-03-02"],
        ["job", "delete", "j-1"],
        ["job", "update", "j-1", "--name", "n2", "--clear-payload"],
        ["dlq", "list"],
        ["dlq", "redrive", "j-1@5"],
        ["worker", "list"],
        ["cluster", "status"],
    ):
        result = run(args, served.endpoint)
        assert result.exit_code == 0, (args, result.stderr)
        assert result.stdout.strip(), args
    status = json.loads(run(["cluster", "status", "-o", "json"], served.endpoint).stdout)
    assert status["partitions"][0] == {"partition": 0, "owner": "n1", "epoch": 41}
    assert status["workers"][0]["worker_id"] == "w1"
    assert list(served.servicer.last("UpdateJob").update_paths) == ["payload", "name"]
    assert served.servicer.last("TriggerJob").idempotency_key == "order-42"


def test_a_node_that_did_not_answer_is_one_warning_line_and_in_the_json(served: Served) -> None:
    served.servicer.missing = [
        scheduler_pb2.MissingNode(
            node_id="n2", address="10.0.0.2:7070", reason="no answer within 2000 ms"
        )
    ]
    table = run(["run", "list", "--limit", "3"], served.endpoint)
    assert table.exit_code == 0, table.stderr
    assert "SUCCEEDED" in table.stdout
    assert table.stderr.splitlines() == [
        "schedctl: warning: no answer from node n2 (no answer within 2000 ms); "
        "the list may be incomplete"
    ]
    doc = json.loads(run(["run", "list", "--limit", "3", "-o", "json"], served.endpoint).stdout)
    assert len(doc["executions"]) == 3
    assert doc["missing_nodes"] == [
        {"node_id": "n2", "address": "10.0.0.2:7070", "reason": "no answer within 2000 ms"}
    ]
    workers = run(["worker", "list", "-o", "json"], served.endpoint)
    assert json.loads(workers.stdout)["missing_nodes"][0]["node_id"] == "n2"
    assert json.loads(workers.stdout)["workers"][0]["node_ids"] == ["n1"]
    assert "the list may be incomplete" in workers.stderr
    status = run(["cluster", "status"], served.endpoint)
    assert status.exit_code == 0 and "n1" in status.stdout
    assert status.stderr.strip().endswith("the status may be incomplete")
    assert len(status.stderr.strip().splitlines()) == 1

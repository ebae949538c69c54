"""schedctl as a person uses it: a real process against a real node and worker, on etcd and
on the embedded store."""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from integration.cluster_harness import Harness, eventually
from schedd.dev import free_port
from schedd.store import prefix_end

pytestmark = pytest.mark.timeout(120)

SCHEDCTL = str(Path(sys.executable).parent / "schedctl")


@pytest.fixture(params=["etcd", "rocksdb"])
async def h(
    request: pytest.FixtureRequest, etcd_prefix: bytes, tmp_path: Path
) -> AsyncIterator[Harness]:
    """A node and a worker, on etcd and on the embedded store: what a user does with
    schedctl works the same on both."""
    if request.param == "etcd":
        where = request.getfixturevalue("etcd_server").endpoint
    else:
        where = f"rocksdb:{tmp_path / 'store'}"
    harness = Harness(where, etcd_prefix, tmp_path)
    await harness.start_node()
    await harness.start_worker()
    try:
        yield harness
    finally:
        await harness.close()


async def ctl(
    h: Harness | None, *args: str, endpoint: str | None = None, stdin: bytes | None = None
) -> tuple[int, str, str]:
    ep = endpoint or (h.address() if h else "")
    proc = await asyncio.create_subprocess_exec(
        SCHEDCTL, "--endpoints", ep, *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(stdin), 60)
    return proc.returncode or 0, out.decode(), err.decode()


def one_line_error(err: str) -> None:
    assert err.strip(), "no error message"
    assert len(err.strip().splitlines()) == 1, err
    assert "Traceback" not in err


async def test_create_then_runs_show_up_durably(h: Harness) -> None:
    code, out, err = await ctl(
        h, "job", "create", "hello", "--schedule", "@every 1s", "--handler", "echo",
        "--payload", '{"msg": "hi"}', "-o", "json",
    )  # fmt: skip
    assert code == 0, err
    job = json.loads(out)
    assert job["id"] and job["name"] == "hello"

    async def runs() -> list[dict[str, Any]]:
        code, out, err = await ctl(h, "run", "list", "--job", job["id"], "-o", "json")
        assert code == 0, err
        doc = json.loads(out)
        assert doc["missing_nodes"] == []
        return list(doc["executions"])

    rows = await eventually(
        runs, lambda rs: any(r["state"] == "SUCCEEDED" for r in rs), what="a run"
    )
    ok = next(r for r in rows if r["state"] == "SUCCEEDED")
    for field in ("id", "job_id", "scheduled_time", "state", "attempt", "fencing_token"):
        assert field in ok, field
    assert ok["job_id"] == job["id"] and ok["fencing_token"] > 0 and ok["attempt"] == 1
    code, out, _ = await ctl(h, "run", "get", ok["id"], "-o", "json")
    assert code == 0 and json.loads(out)["state"] == "SUCCEEDED"
    for verb in ("pause", "resume", "trigger"):
        code, _, err = await ctl(h, "job", verb, job["id"])
        assert code == 0, (verb, err)
    code, out, _ = await ctl(h, "cluster", "status", "-o", "json")
    status = json.loads(out)
    assert code == 0 and len(status["partitions"]) == 4
    code, _, err = await ctl(h, "job", "delete", job["id"])
    assert code == 0, err
    code, _, err = await ctl(h, "job", "get", job["id"])
    assert code == 3
    one_line_error(err)


async def test_errors_have_exit_codes_and_write_nothing(h: Harness) -> None:
    store = h.nodes[0].kv
    code, _, err = await ctl(
        h, "job", "create", "x", "--schedule", "61 * * * *", "--handler", "echo"
    )
    assert code == 2
    one_line_error(err)
    code, _, err = await ctl(
        h,
        "job",
        "create",
        "x",
        "--schedule",
        "* * * * *",
        "--tz",
        "Nowhere/City",
        "--handler",
        "echo",
    )
    assert code == 2
    one_line_error(err)
    code, _, err = await ctl(
        h, "job", "create", "x", "--schedule", "* * * * *", "--handler", "echo", "--payload", "{bad"
    )
    assert code == 2
    one_line_error(err)
    start = h.prefix + b"jobs/"
    assert await store.count(start, prefix_end(start)) == 0
    args = (
        "job",
        "create",
        "i",
        "--schedule",
        "0 9 * * *",
        "--handler",
        "echo",
        "--idempotency-key",
        "k",
    )
    assert (await ctl(h, *args))[0] == 0
    assert (await ctl(h, *args))[0] == 0
    code, _, err = await ctl(
        h,
        "job",
        "create",
        "i",
        "--schedule",
        "0 10 * * *",
        "--handler",
        "echo",
        "--idempotency-key",
        "k",
    )
    assert code == 4
    one_line_error(err)
    code, _, err = await ctl(None, "job", "list", endpoint=f"127.0.0.1:{free_port()}")
    assert code == 5
    one_line_error(err)


async def test_dead_letters_list_and_redrive(h: Harness) -> None:
    code, out, err = await ctl(
        h, "job", "create", "doomed", "--schedule", "@after 1s", "--handler", "fail",
        "--max-attempts", "1", "-o", "json",
    )  # fmt: skip
    assert code == 0, err
    job_id = json.loads(out)["id"]

    async def dead() -> list[dict[str, Any]]:
        code, out, err = await ctl(h, "dlq", "list", "-o", "json")
        assert code == 0, err
        return [d for d in json.loads(out)["executions"] if d["job_id"] == job_id]

    rows = await eventually(dead, lambda d: len(d) == 1, what="a dead letter")
    code, _, err = await ctl(h, "dlq", "redrive", rows[0]["id"])
    assert code == 0, err
    await eventually(
        lambda: asyncio.sleep(0, result=len(h.calls.get("fail", []))), lambda n: n >= 2
    )


async def test_redrive_all_retry_knobs_and_payload_files(h: Harness, tmp_path: Path) -> None:
    payload_file = tmp_path / "payload.json"
    payload_file.write_text('{"from": "file"}')
    ids = []
    for n, (payload, stdin) in enumerate(((f"@{payload_file}", None), ("-", b'{"from": "stdin"}'))):
        code, out, err = await ctl(
            h, "job", "create", f"doomed-{n}", "--schedule", "@after 1s", "--handler", "fail",
            "--max-attempts", "1", "--payload", payload, "-o", "json", stdin=stdin,
        )  # fmt: skip
        assert code == 0, err
        ids.append(json.loads(out)["id"])
    code, out, _ = await ctl(h, "job", "get", ids[0], "-o", "json")
    assert json.loads(out)["payload"] == {"from": "file"}
    code, out, _ = await ctl(h, "job", "get", ids[1], "-o", "json")
    assert json.loads(out)["payload"] == {"from": "stdin"}
    code, _, err = await ctl(
        h, "job", "create", "x", "--schedule", "@after 1h", "--handler", "echo",
        "--payload", f"@{tmp_path / 'missing.json'}",
    )  # fmt: skip
    assert code != 0 and "cannot read" in err and "missing.json" in err
    one_line_error(err)
    big = tmp_path / "big.json"
    big.write_text(json.dumps("x" * 300_000))
    code, _, err = await ctl(
        h, "job", "create", "x", "--schedule", "@after 1h", "--handler", "echo",
        "--payload", f"@{big}",
    )  # fmt: skip
    assert code != 0 and "300002 bytes" in err and "262144" in err, err
    one_line_error(err)

    code, out, err = await ctl(
        h, "job", "create", "patient", "--schedule", "@after 1h", "--handler", "echo",
        "--retry-initial", "2s", "--retry-max", "1m", "--retry-multiplier", "3", "-o", "json",
    )  # fmt: skip
    assert code == 0, err
    retry = json.loads(out)["retry"]
    assert (retry["initial_backoff_ms"], retry["max_backoff_ms"], retry["multiplier"]) == (
        2000, 60_000, 3.0,
    )  # fmt: skip
    code, out, err = await ctl(
        h, "job", "update", json.loads(out)["id"], "--retry-max", "90s", "-o", "json"
    )
    assert code == 0, err
    assert json.loads(out)["retry"]["max_backoff_ms"] == 90_000
    assert json.loads(out)["retry"]["initial_backoff_ms"] == 2000

    async def dead() -> list[str]:
        code, out, err = await ctl(h, "dlq", "list", "-o", "json")
        assert code == 0, err
        return sorted(d["job_id"] for d in json.loads(out)["executions"])

    await eventually(dead, lambda d: d == sorted(ids), what="two dead letters")
    code, out, err = await ctl(h, "dlq", "redrive", "--all", "-o", "json")
    assert code == 0, err
    assert "redrove 2 dead letters" in err
    assert sorted(e["job_id"] for e in json.loads(out)["executions"]) == sorted(ids)

    async def attempts() -> list[int]:
        code, out, err = await ctl(h, "dlq", "list", "-o", "json")
        assert code == 0, err
        return sorted(d["attempt"] for d in json.loads(out)["executions"])

    # "fail" always fails: both ran once more and are back, after their second attempt
    await eventually(attempts, lambda a: a == [2, 2], what="the redriven runs to fail again")
    code, _, err = await ctl(h, "dlq", "redrive", "--tenant", "nobody")
    assert code == 0 and "no dead letters of tenant nobody" in err
    code, _, err = await ctl(h, "dlq", "redrive", "x@1", "--all")
    assert code != 0
    one_line_error(err)


def _iso_utc(ms: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ms / 1000))


async def test_backfill_dry_run_steps_and_rate(h: Harness) -> None:
    # No worker runs "nobody": backfilled executions stay live (pending) and count as existing.
    code, out, err = await ctl(
        h, "job", "create", "past", "--schedule", "* * * * * *", "--handler", "nobody",
        "-o", "json",
    )  # fmt: skip
    assert code == 0, err
    job_id = json.loads(out)["id"]
    a = (int(time.time()) - 60) * 1000
    b = a + 20_000

    async def backfill(*args: str) -> tuple[list[dict[str, Any]], str]:
        code, out, err = await ctl(h, "job", "backfill", job_id, *args, "-o", "json")
        assert code == 0, err
        doc = json.loads(out)  # a dry run lists fires, a backfill the executions it made
        return doc["fires" if "--dry-run" in args else "executions"], err

    rows, err = await backfill("--start", _iso_utc(a), "--end", _iso_utc(b), "--dry-run")
    assert [r["action"] for r in rows] == ["create"] * 20
    assert rows[0]["scheduled_ms"] == a and "would create 20, 0 exist already" in err
    assert [r for r in await h.runs(job_id) if r.scheduled_ms < b] == []  # nothing written

    made, err = await backfill("--start", _iso_utc(a), "--end", _iso_utc(a + 5000))
    assert len(made) == 5 and "created 5, 0 exist already" in err

    rows, err = await backfill("--start", _iso_utc(a), "--end", _iso_utc(b), "--dry-run")
    assert [r["action"] for r in rows] == ["exists"] * 5 + ["create"] * 15

    began = time.monotonic()
    made, err = await backfill(
        "--start", _iso_utc(a), "--end", _iso_utc(b), "--chunk", "4", "--limit", "12",
        "--rate", "2",
    )  # fmt: skip
    took = time.monotonic() - began
    assert len(made) == 7, made
    assert "created 7, 5 exist already; 8 more fires in the range left out by --limit" in err
    assert took >= 1.4, took  # 3 created by the second step at 2/s: the third waits 1.5 s
    assert "backfill: created" in err  # progress between the steps
    past = sorted(r.scheduled_ms for r in await h.runs(job_id) if r.scheduled_ms < b)
    assert past == [a + 1000 * i for i in range(12)]

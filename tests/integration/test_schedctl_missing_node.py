"""schedctl (a real process) against two real nodes when one of them does not answer: the
data still comes, with one warning line on stderr naming the node, and ``missing_nodes`` in
``-o json``; ``run get`` says unavailable (exit 5) rather than not found (exit 3)."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import pytest

from integration.cluster_harness import Harness, eventually
from schedd.v1 import execution_pb2

pytestmark = pytest.mark.timeout(60)

SCHEDCTL = str(Path(sys.executable).parent / "schedctl")


async def _ctl(endpoint: str, *args: str) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        SCHEDCTL, "--endpoints", endpoint, "--timeout", "10", *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(), 30)
    return proc.returncode or 0, out.decode(), err.decode()


async def test_schedctl_names_the_node_that_did_not_answer(h: Harness) -> None:
    a = await h.start_node(node_id="a", peer_timeout_ms=500)
    b = await h.start_node(node_id="b", peer_timeout_ms=500)
    await h.start_worker("w1")
    client = await h.connect()
    ids = []
    for i in range(6):
        job = (await client.create_job(f"j{i}", schedule="@every 1h", handler="echo")).job
        ids.append((await client.trigger_job(job.id)).id)
    await eventually(
        lambda: client.list_executions(limit=100),
        lambda rows: (
            len(rows) == 6 and all(r.state == execution_pb2.EXECUTION_SUCCEEDED for r in rows)
        ),
        what="the runs to succeed",
    )
    on_b = [i for i in ids if b.history.get(i) is not None]
    assert on_b, "b settled none: the partitions were not shared"

    code, out, err = await _ctl(a.address, "run", "get", "nope@1700000000000")
    assert code == 3 and "not found" in err

    await b.server.stop(0)  # b's session lives on: still a member, but it does not answer
    code, out, err = await _ctl(a.address, "run", "list")
    assert code == 0, err
    (line,) = err.splitlines()
    assert line.startswith("schedctl: warning: no answer from node b (UNAVAILABLE")
    assert line.endswith("; the list may be incomplete")
    assert "SUCCEEDED" in out

    code, out, err = await _ctl(a.address, "run", "list", "-o", "json")
    doc = json.loads(out)
    assert code == 0 and [m["node_id"] for m in doc["missing_nodes"]] == ["b"]
    assert {r["id"] for r in doc["executions"]} == set(ids) - set(on_b)

    code, out, err = await _ctl(a.address, "worker", "list", "-o", "json")
    assert code == 0 and json.loads(out)["missing_nodes"][0]["address"] == b.address
    code, out, err = await _ctl(a.address, "cluster", "status")
    assert code == 0 and "(no answer)" in out
    assert err.count("\n") == 1 and "the status may be incomplete" in err

    code, out, err = await _ctl(a.address, "run", "get", on_b[0])
    assert code == 5, (out, err)
    assert len(err.strip().splitlines()) == 1 and "no answer from node b" in err

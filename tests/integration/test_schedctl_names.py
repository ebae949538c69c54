"""Jobs by name (real node and worker processes, schedctl): a name is taken once per tenant,
every command takes a name or an id, and run lists and dead letters show job names, with
"(deleted)" once the job is gone."""

from __future__ import annotations

import json

import pytest

from integration.cluster_harness import Harness, eventually
from integration.test_schedctl_e2e import ctl, one_line_error

pytestmark = pytest.mark.timeout(120)


async def test_names_are_unique_and_name_jobs_everywhere(h_embedded: Harness) -> None:
    h = h_embedded
    await h.start_node()
    await h.start_worker()
    args = ("job", "create", "hello", "--schedule", "@every 1s", "--handler", "echo")
    code, out, err = await ctl(h, *args, "-o", "json")
    assert code == 0, err
    job_id = json.loads(out)["id"]

    code, out, err = await ctl(h, *args)  # the same name again
    assert code == 4 and out == "", (out, err)
    one_line_error(err)
    assert f"job.name: 'hello' is taken in tenant 'default' by job '{job_id}'" in err

    for ref in ("hello", job_id, "default/hello"):  # a name, an id, a tenant's name
        code, out, err = await ctl(h, "job", "get", ref, "-o", "json")
        assert code == 0 and json.loads(out)["id"] == job_id, (ref, err)
    code, _, err = await ctl(h, "job", "get", "nobody")
    assert code == 3 and "no job with id or name 'nobody'" in err
    one_line_error(err)

    code, out, err = await ctl(h, "job", "update", "hello", "--name", "hi", "-o", "json")
    assert code == 0 and json.loads(out)["name"] == "hi", err
    code, out, err = await ctl(h, *args, "-o", "json")  # "hello" is free again
    assert code == 0, err
    second = json.loads(out)["id"]

    async def runs(ref: str) -> list[dict[str, object]]:
        code, out, err = await ctl(h, "run", "list", "--job", ref, "-o", "json")
        assert code == 0, err
        return list(json.loads(out)["executions"])

    rows = await eventually(lambda: runs("hi"), bool, what="runs of the renamed job")
    assert {r["job_id"] for r in rows} == {job_id} and {r["job_name"] for r in rows} == {"hi"}
    code, table, err = await ctl(h, "run", "list", "--job", "hi")
    assert code == 0 and " hi " in table and "JOB" in table, table

    code, out, err = await ctl(h, "job", "pause", "hi", "-o", "json")
    assert code == 0 and json.loads(out)["paused"] is True, err
    code, out, err = await ctl(h, "job", "delete", "hi", "-o", "json")
    assert code == 0 and json.loads(out)["id"] == job_id, err
    rows = await runs(job_id)  # its history outlives it: listed by id, named "(deleted)"
    assert rows and {r["job_name"] for r in rows} == {""}
    code, table, err = await ctl(h, "run", "list", "--job", job_id)
    assert code == 0 and "(deleted)" in table, table
    assert (await ctl(h, "job", "delete", second))[0] == 0

"""schedctl with jobs that run after jobs, against a real node and worker (embedded store):
job create/update --after (and the one-line refusals), job list and describe naming parents
and children, run list --root over a real triggered root fire, and apply of a file that holds
a root and its children (children first in the file) whose export applies unchanged, here and
in another cluster."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from integration.cluster_harness import Harness, eventually
from integration.test_schedctl_e2e import ctl, one_line_error
from schedd.v1 import execution_pb2

pytestmark = pytest.mark.timeout(90)

DONE = execution_pb2.EXECUTION_SUCCEEDED


async def _ok(h: Harness, *args: str) -> str:
    code, out, err = await ctl(h, *args)
    assert code == 0, (args, err)
    return out


async def _refused(h: Harness, *args: str, says: str) -> None:
    code, out, err = await ctl(h, *args)
    assert code != 0 and not out, (args, out)
    one_line_error(err)
    assert says in err, err


async def test_create_list_describe_update_and_run_list_root(
    h_embedded: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    h = h_embedded
    monkeypatch.setenv("COLUMNS", "300")  # the tables on one line each
    await h.start_node()
    await h.start_worker()
    echo = ("--handler", "echo")
    await _ok(h, "job", "create", "root", "--schedule", "@every 1h", *echo)
    await _refused(h, "job", "create", "x", "-s", "@every 1m", "--after", "root", *echo,
                   says="not both")  # fmt: skip
    await _refused(h, "job", "create", "x", *echo, says="--schedule or --after")
    await _refused(h, "job", "create", "x", "--after", "nope", *echo, says="after[0]")
    out = await _ok(h, "job", "create", "export", "--after", "root", *echo)
    assert "runs after" in out
    await _ok(h, "job", "create", "import", "--after", "root", *echo)
    load = json.loads(await _ok(h, "job", "create", "load", "--after", "export", "--after",
                                "import", *echo, "-o", "json"))  # fmt: skip
    ids = {
        j["name"]: j["id"] for j in json.loads(await _ok(h, "job", "list", "-o", "json"))["jobs"]
    }
    assert load["after"] == [ids["export"], ids["import"]] and not load["schedule"]["expr"]

    table = await _ok(h, "job", "list")
    assert "after export, import" in table and "after root" in table
    described = await _ok(h, "job", "describe", "load")
    assert f"runs after export ({ids['export']}), import ({ids['import']})" in described
    assert f"root {ids['root']}" in described and "next fires" not in described
    doc = json.loads(await _ok(h, "job", "describe", "root", "-o", "json"))
    assert sorted(c["name"] for c in doc["children"]) == ["export", "import"]
    assert doc["parents"] == [] and "root" not in doc

    fire = json.loads(await _ok(h, "job", "trigger", "root", "-o", "json"))["scheduled_ms"]
    c = await h.connect()
    await eventually(
        lambda: h.runs(ids["load"]), lambda rs: [r.state for r in rs] == [DONE],
        what="load to run after export and import", timeout=20,
    )  # fmt: skip
    await _ok(h, "job", "trigger", "import")  # a run of import alone: not of the root fire
    for root in (f"{ids['root']}@{fire}", f"root@{fire}"):  # by id and by name
        rows = json.loads(await _ok(h, "run", "list", "--root", root, "-o", "json"))
        assert sorted(r["id"] for r in rows["executions"]) == sorted(
            f"{ids[n]}@{fire}" for n in ("root", "export", "import", "load")
        )
        assert {r["state"] for r in rows["executions"]} == {"SUCCEEDED"}
    listed = await _ok(h, "run", "list", "--root", f"{ids['root']}@{fire}")
    assert "load" in listed and "SUCCEEDED" in listed
    await _refused(h, "run", "list", "--root", "root", says="root")
    await _refused(h, "run", "list", "--root", f"{ids['root']}@{fire}", "--tenant", "ops",
                   says="root")  # fmt: skip

    await _refused(h, "job", "update", "load", "--no-after", says="--schedule")
    await _refused(h, "job", "update", "load", "--after", "root", "-s", "@every 1m",
                   says="not both")  # fmt: skip
    await _ok(h, "job", "update", "load", "--no-after", "--schedule", "@every 2h")
    job = await c.get_job(ids["load"])
    assert not job.after and job.schedule.expr == "@every 2h"
    assert ids["load"] not in (await c.get_job(ids["export"])).children
    await _ok(h, "job", "update", "load", "--after", "import")
    job = await c.get_job(ids["load"])
    assert list(job.after) == [ids["import"]] and not job.schedule.expr


SPECS = """
name: load
tenant: ops
after: [export, import]
handler: echo
---
name: export
tenant: ops
after: [extract]
handler: echo
retry: {max_attempts: 2}
---
name: import
tenant: ops
after: extract
handler: echo
---
name: extract
tenant: ops
schedule: {expr: "0 3 * * *", timezone: Europe/Berlin}
handler: echo
"""


async def test_apply_creates_parents_first_and_export_round_trips(
    h_embedded: Harness, tmp_path: Path
) -> None:
    h = h_embedded
    await h.start_node()
    specs = tmp_path / "pipeline.yaml"
    specs.write_text(SPECS)
    code, out, err = await ctl(h, "apply", "-f", str(specs), "-o", "json")
    assert code == 0, err
    assert {r["name"]: r["action"] for r in json.loads(out)} == {
        "load": "create", "export": "create", "import": "create", "extract": "create",
    }  # fmt: skip
    c = await h.connect()
    jobs = {j.name: j async for j in c.list_jobs(tenant="ops")}
    assert list(jobs["load"].after) == [jobs["export"].id, jobs["import"].id]
    assert sorted(jobs["extract"].children) == sorted([jobs["export"].id, jobs["import"].id])
    code, out, err = await ctl(h, "apply", "-f", str(specs), "-o", "json")
    assert code == 0 and {r["action"] for r in json.loads(out)} == {"unchanged"}, out

    changed = specs.read_text().replace("after: [export, import]", "after: [import]")
    specs.write_text(changed)
    code, out, err = await ctl(h, "apply", "-f", str(specs), "-o", "json")
    assert code == 0, err
    assert [(r["name"], r["changes"]) for r in json.loads(out) if r["action"] == "update"] == [
        ("load", ["after"])
    ]
    cyclic = tmp_path / "cycle.yaml"
    cyclic.write_text(
        "name: p\nafter: [q]\nhandler: echo\n---\nname: q\nafter: [p]\nhandler: echo\n"
    )
    code, out, err = await ctl(h, "apply", "-f", str(cyclic), "-o", "json")
    assert code == 1 and all("cycle" in r["action"] for r in json.loads(out)), out

    exported = tmp_path / "export.yaml"
    code, _, err = await ctl(h, "export", "--tenant", "ops", "--file", str(exported))
    assert code == 0, err
    docs = {d["name"]: d for d in yaml.safe_load_all(exported.read_text())}
    assert docs["load"]["after"] == ["import"] and "schedule" not in docs["load"]
    assert docs["export"]["after"] == ["extract"] and "after" not in docs["extract"]
    code, out, err = await ctl(h, "apply", "-f", str(exported), "-o", "json")
    assert code == 0 and {r["action"] for r in json.loads(out)} == {"unchanged"}, out

    other = Harness(f"rocksdb:{tmp_path / 'other'}", h.prefix, tmp_path / "o")
    try:
        await other.start_node()
        code, out, err = await ctl(other, "apply", "-f", str(exported), "-o", "json")
        assert code == 0 and {r["action"] for r in json.loads(out)} == {"create"}, err
        code, again, err = await ctl(other, "export", "--tenant", "ops", "-o", "json")
        assert code == 0, err
        assert {d["name"]: d for d in json.loads(again)} == docs
    finally:
        await other.close()

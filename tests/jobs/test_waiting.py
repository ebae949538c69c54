"""Work no worker can run is never silent (real node and worker processes, schedctl):
`job create` and `apply` warn, each waiting run says why and since when, the node's metrics
count it, and a worker that serves it ends the wait."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from jobs.conftest import KindsCluster
from jobs.test_http_jobs import ctl
from jobs.test_metrics import scrape, value

from integration.cluster_harness import eventually
from schedd.dev import free_port
from schedd.v1 import execution_pb2

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]
WHY = "no worker serves handler 'mark' on queue 'mail'"
UNSERVED = 'schedd_dispatch_unserved{queue="mail"}'
LIVE = (execution_pb2.EXECUTION_PENDING, execution_pb2.EXECUTION_DISPATCHED)


async def test_waiting_for_a_worker_is_told_until_one_connects(
    kinds: KindsCluster, tmp_path: Path
) -> None:
    metrics = f"127.0.0.1:{free_port()}"
    await kinds.start(node_args=("--metrics-listen", metrics))  # w0: queue default only

    code, out, err = await ctl(
        kinds, "job", "create", "mailer", "--schedule", "@every 1s", "--handler", "mark",
        "--queue", "mail", "-o", "json",
    )  # fmt: skip
    assert code == 0, err
    assert err.strip() == (
        "schedctl: warning: no connected worker serves handler 'mark' on queue 'mail': "
        "its runs will wait until one connects"
    )
    job_id = yaml.safe_load(out)["id"]

    runs = await eventually(
        lambda: kinds.runs(job_id),
        lambda rs: any(r.waiting == WHY for r in rs),
        timeout=30,
        what="a run that says why it waits",
    )
    waiting = [r for r in runs if r.waiting]
    assert all(r.state in LIVE and r.waiting_since_ms > 0 for r in waiting), waiting
    code, out, err = await ctl(kinds, "run", "list", "--job", job_id)
    assert code == 0, err
    assert f"waiting: {WHY} since" in out and "UTC" in out, out
    code, out, err = await ctl(kinds, "run", "get", waiting[0].id, "-o", "json")
    assert code == 0 and yaml.safe_load(out)["waiting"] == WHY, out

    text = await eventually(
        lambda: scrape(metrics), lambda t: value(t, UNSERVED) >= 1, timeout=20, what="gauge"
    )
    assert value(text, 'schedd_dispatch_unserved_seconds{queue="mail"}') >= 0
    assert value(text, 'schedd_dispatch_unserved{queue="default"}') == 0

    # apply warns too, naming the jobs (the same handler, another name)
    code, spec, err = await ctl(kinds, "job", "get", job_id, "-o", "yaml")
    assert code == 0, err
    doc = yaml.safe_load(spec)
    doc["name"] = "mailer-2"
    (tmp_path / "jobs.yaml").write_text(yaml.safe_dump(doc))
    code, out, err = await ctl(kinds, "apply", "-f", str(tmp_path / "jobs.yaml"))
    assert code == 0, err
    assert (
        "schedctl: warning: no connected worker serves handler 'mark' on queue 'mail': the "
        "runs of 'mailer-2' will wait until one connects"
    ) in err, err

    # a worker that serves it: the waiting runs go out and succeed, nothing says "waiting"
    kinds.add_worker(
        "w1", "--import", "jobs.herd_handlers", "--queue", "mail",
        env={"SCHEDD_HERD_LOG": str(tmp_path / "marks.log")},
    )  # fmt: skip
    before = {r.id for r in waiting}
    runs = await eventually(
        lambda: kinds.runs(job_id),
        lambda rs: {r.id for r in rs if r.state == execution_pb2.EXECUTION_SUCCEEDED} >= before,
        timeout=30,
        what="the runs that waited succeed once a worker serves them",
    )
    assert not [r for r in runs if r.waiting and r.waiting.startswith("no worker")]
    await eventually(
        lambda: scrape(metrics), lambda t: value(t, UNSERVED) == 0, timeout=20, what="no gauge"
    )
    made = await kinds.client.create_job(
        "mailer-3", schedule="@every 1h", handler="mark", queue="mail"
    )
    assert made.warnings == ()

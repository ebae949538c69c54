"""A worker scaled down (SIGTERM) loses nothing: real processes (3 etcd members, a node, two
``schedd worker`` processes running the effect-ledger handler).

Worker w0 (capacity 3, --shutdown-timeout 5) runs three executions and holds four more that
were sent ahead of their instant (it cannot start them: its slots are full). w1 (no
prefetch) connects. SIGTERM to w0: the four held ones are given back at once and run on w1;
the two short running ones finish on w0 within the grace; the long one is cancelled at the
end of the grace, handed back and run again on w1. Every execution ends exactly once in
effect (one accepted fenced write per fire, the ledger of :mod:`cluster.effects`).

Before the stop, the node's and w0's /metrics carry the autoscaling metrics the manifests in
cluster/k8s read, with the values ``ListQueues`` gives. The times measured are printed
(``-s``) and asserted loosely; docs/operations.md quotes them.
"""

from __future__ import annotations

import os
import re
import signal
import threading
import time
import urllib.request

import pytest
from cluster.effects import EffectLedger
from cluster.procs import SCHEDD, TESTS_DIR, ClusterProcs, Proc, wait_for
from unit.test_k8s_autoscaling import autoscaler_metrics

from schedd.client import Client
from schedd.dev import free_port
from schedd.v1 import execution_pb2, scheduler_pb2

pytestmark = [pytest.mark.timeout(90), pytest.mark.slow, pytest.mark.cluster]

GRACE_S = 5.0


def _worker(procs: ClusterProcs, name: str, *extra: str) -> Proc:
    argv = [
        *SCHEDD, "worker",
        "--connect", procs.node_address("n0"),
        "--import", "cluster.effect_handlers",
        "--worker-id", name,
        "--data-dir", str(procs.root / name),
        *extra,
    ]  # fmt: skip
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(TESTS_DIR), os.environ.get("PYTHONPATH", "")]),
        "SCHEDD_EFFECTS_DB": str(procs.effects_db),
        "SCHEDD_WORKER_NAME": name,
        "SCHEDD_LOG_LEVEL": os.environ.get("SCHEDD_CLUSTER_LOG", "info"),
    }
    proc = Proc(name, argv, env, procs.root / "logs" / f"{name}.log")
    procs.procs[name] = proc
    proc.start()
    return proc


def _scrape(port: int) -> dict[str, float]:
    """``name{labels}`` -> value of a /metrics page."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    out: dict[str, float] = {}
    for line in text.splitlines():
        m = re.fullmatch(r"([a-z_:]+(?:\{[^}]*\})?) (\S+)", line)
        if m and not line.startswith("#"):
            out[m.group(1)] = float(m.group(2))
    return out


def _default(client: Client) -> scheduler_pb2.QueueStatus:
    (row,) = [q for q in client.list_queues().queues if q.queue == "default"]
    return row


def test_a_sigtermed_worker_hands_back_held_and_running_work(
    procs: ClusterProcs, ledger: EffectLedger
) -> None:
    node_metrics, w0_metrics = free_port(), free_port()
    procs.add_node("n0", extra_env={"SCHEDD_METRICS_LISTEN": f"127.0.0.1:{node_metrics}"})
    procs.wait_owned(["n0"])
    w0 = _worker(
        procs, "w0", "--capacity", "3", "--prefetch", "100",
        "--shutdown-timeout", str(GRACE_S), "--metrics-listen", f"127.0.0.1:{w0_metrics}",
    )  # fmt: skip
    client = procs.client("n0")
    wait_for(lambda: _default(client), lambda q: q.workers == 1, timeout=20, what="w0")

    jobs: dict[str, str] = {}
    for name, work_ms in (("short1", 4000), ("short2", 4000), ("long", 9000)):
        job = client.create_job(
            name, schedule="@every 1h", handler="effect", payload={"work_ms": work_ms}
        ).job
        client.trigger_job(job.id)
        jobs[name] = job.id
    wait_for(lambda: _default(client), lambda q: q.running == 3, timeout=10, what="3 running")
    _worker(procs, "w1", "--capacity", "8", "--prefetch", "0")  # starts meanwhile
    for i in range(4):  # held on w0 (the only worker that holds) ahead of their instant
        job = client.create_job(
            f"held{i}", schedule="@after 2s", handler="effect", payload={"work_ms": 100}
        ).job
        jobs[f"held{i}"] = job.id
    before = wait_for(
        lambda: _default(client),
        lambda q: q.held == 4 and q.running == 3 and q.workers == 2,
        timeout=15,
        what="4 held and 3 running on w0, w1 connected",
    )
    assert (before.due, before.capacity, before.free_slots) == (0, 11, 8)

    # The autoscaling metrics, on the real processes' /metrics.
    node, worker = _scrape(node_metrics), _scrape(w0_metrics)
    assert node['schedd_queue_depth{queue="default"}'] == 4
    assert node['schedd_queue_running{queue="default"}'] == 3
    assert worker['schedd_queue_free_slots{queue="default"}'] == 0
    assert worker['schedd_queue_slots{queue="default"}'] == 3
    served = {k.partition("{")[0] for k in (*node, *worker)}
    assert autoscaler_metrics() <= served

    held_gone: list[float] = []

    def watch() -> None:  # when the held ones have left w0 (given back, re-dispatched)
        while time.monotonic() < t0 + 20:
            status = client.cluster_status()
            if not any(w.worker_id == "w0" and w.held for w in status.workers):
                held_gone.append(time.monotonic() - t0)
                return
            time.sleep(0.02)

    t0, wall0 = time.monotonic(), time.time() * 1000
    w0.signal(signal.SIGTERM)
    watcher = threading.Thread(target=watch)
    watcher.start()
    assert w0.wait(GRACE_S + 20) == 0
    exited_s = time.monotonic() - t0
    watcher.join()

    def done() -> list[execution_pb2.Execution]:
        return [r for r in client.list_executions(limit=100) if r.job_id in jobs.values()]

    runs = wait_for(
        done,
        lambda rs: len(rs) == 7 and all(r.state == execution_pb2.EXECUTION_SUCCEEDED for r in rs),
        timeout=20,
        what="every execution to succeed",
    )
    assert sorted(r.job_id for r in runs) == sorted(jobs.values())  # once each

    by_job: dict[str, list[str]] = {}
    starts: dict[str, list[float]] = {}
    for a in ledger.attempts():
        by_job.setdefault(a.job_id, []).append(a.worker)
        starts.setdefault(a.job_id, []).append(a.started_ms)
    names = {v: k for k, v in jobs.items()}
    timeline = sorted(
        (round(a.started_ms / 1000 - wall0 / 1000, 3), names[a.job_id], a.worker)
        for a in ledger.attempts()
    )
    writes = ledger.writes()
    timeline += sorted(
        (round(w.at_ms / 1000 - wall0 / 1000, 3), names[w.job_id], f"{w.worker} wrote")
        for w in writes
    )
    print("\nattempts and effects, s after SIGTERM:", sorted(timeline))
    assert all(w.accepted for w in writes)
    effects = sorted((w.job_id, w.worker) for w in writes)
    expected = sorted(
        [(jobs["short1"], "w0"), (jobs["short2"], "w0"), (jobs["long"], "w1")]
        + [(jobs[f"held{i}"], "w1") for i in range(4)]
    )
    assert effects == expected  # one effect per fire: the shorts drained, the rest on w1
    for i in range(4):  # never started on w0: given back unstarted
        assert by_job[jobs[f"held{i}"]] == ["w1"]
    assert by_job[jobs["long"]] == ["w0", "w1"]  # cancelled after the grace, run again

    held_on_w1_s = max(min(starts[jobs[f"held{i}"]]) for i in range(4)) / 1000 - wall0 / 1000
    long_again_s = max(starts[jobs["long"]]) / 1000 - wall0 / 1000
    held_ids = {jobs[f"held{i}"] for i in range(4)}
    held_runs = [a for a in ledger.attempts() if a.job_id in held_ids]
    # Each could start at its instant or at the SIGTERM, whichever came later (w0's slots
    # were full until then).
    wait_ms = max(a.started_ms - max(a.scheduled_ms, int(wall0)) for a in held_runs)
    print(
        f"\nSIGTERM -> held given back: {held_gone[0] if held_gone else -1:.3f} s; "
        f"held all started on w1: {held_on_w1_s:.3f} s; long one started again on w1: "
        f"{long_again_s:.3f} s; w0 exited: {exited_s:.3f} s (grace {GRACE_S} s); "
        f"held ones started on w1 at most {wait_ms} ms after they could"
    )
    assert held_gone and held_gone[0] < 1.0
    assert wait_ms < 1000
    assert GRACE_S <= exited_s < GRACE_S + 3
    assert GRACE_S <= long_again_s < GRACE_S + 3

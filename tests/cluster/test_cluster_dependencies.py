"""Jobs that run after jobs on a real 3-node cluster, through faults: a node SIGKILLed (and
the partition moves of its failover and its return), a node frozen past its lease and
resumed (a zombie whose late writes must be refused), a worker SIGKILLed mid-job, a node
cut off from etcd (black-holed) and restored, and the etcd leader SIGKILLed (every write
stalls until a new one is elected; partitions move and their executions are adopted).
A chain of 3, a fan-out to 10 and a fan-in of 3 under per-second roots: each child runs
exactly once per root fire, and only after every parent's effect for that fire (the effect
ledger of :mod:`cluster.effects`), and no execution is left unsettled in the store.

The leader kill found an adoption fault: a worker answered the new owner's probe from its
ledger in the batch that also carried its old token's result, and the stale result shadowed
the current one, so the execution stayed PENDING after its effect and its children never
started (see ``test_a_stale_result_does_not_shadow_the_current_one_in_its_batch``)."""

from __future__ import annotations

import json
import time
from collections import defaultdict

import pytest
from cluster.check import expected_fires, first_fires, missing, verify
from cluster.effects import EffectLedger
from cluster.procs import ClusterProcs, wait_for
from cluster.scenario import Scenario

from schedd.client import Client
from schedd.dev import EtcdCluster
from schedd.v1 import job_pb2

pytestmark = [pytest.mark.timeout(240), pytest.mark.slow, pytest.mark.cluster]


def _after(client: Client, name: str, parents: list[str]) -> str:
    job = job_pb2.Job(
        name=name, handler=job_pb2.HandlerTarget(name="effect"), after=parents,
        payload=json.dumps({"work_ms": 50}).encode(),
    )  # fmt: skip
    return client.create(job).job.id


def _too_early(ledger: EffectLedger, parents: dict[str, list[str]]) -> list[str]:
    """Children that started before one of their parents' effects for the same fire."""
    done: dict[tuple[str, int], int] = {}
    for w in ledger.writes():
        if w.accepted:
            done.setdefault((w.job_id, w.scheduled_ms), w.at_ms)
    early = []
    for a in ledger.attempts():
        for p in parents.get(a.job_id, ()):
            at = done.get((p, a.scheduled_ms))
            if at is None or a.started_ms < at:
                early.append(f"{a.execution_id} started before {p}@{a.scheduled_ms}'s effect")
    return early


def test_dependents_run_once_after_their_parents_through_node_faults(
    procs: ClusterProcs, ledger: EffectLedger, etcd3: EtcdCluster
) -> None:
    s = Scenario(procs, ledger)
    s.start(job_count=3, work_ms=100)
    r_chain, r_fan, r_join = s.jobs
    client = procs.client("n0")
    c1 = _after(client, "chain-1", [r_chain])
    c2 = _after(client, "chain-2", [c1])
    fan = [_after(client, f"fan-{i}", [r_fan]) for i in range(10)]
    mids = [_after(client, f"mid-{i}", [r_join]) for i in range(3)]
    join = _after(client, "join", mids)
    parents = {c1: [r_chain], c2: [c1], join: mids}
    parents.update({f: [r_fan] for f in fan})
    parents.update({m: [r_join] for m in mids})
    first = wait_for(
        lambda: first_fires(ledger, list(parents)), lambda f: len(f) == len(parents),
        timeout=30, what="every dependent's first run",
    )  # fmt: skip
    began = time.time()
    procs.kill("n1")
    procs.wait_owned(["n0", "n2"])
    failover_s = time.time() - began
    procs.restart("n1")  # its partitions move back to it
    procs.wait_owned(["n0", "n1", "n2"])
    paused = time.time()
    procs.pause("n2")  # a zombie: frozen past its lease, its partitions taken
    procs.wait_owned(["n0", "n1"])
    time.sleep(max(0.0, procs.session_ttl_s * 2 + 1 - (time.time() - paused)))
    procs.resume("n2")
    procs.wait_owned(["n0", "n1", "n2"], timeout=40)
    s.kill_worker("w0")  # mid-job: its runs are redelivered (work_ms 50-100, a fire a second)
    procs.cut_from_etcd("n1")  # black-holed: it fences itself, the others take its share
    procs.wait_owned(["n0", "n2"], via="n0")
    procs.restart("w0")
    procs.reconnect_to_etcd("n1")
    procs.wait_owned(["n0", "n1", "n2"], timeout=40)
    leader = etcd3.leader()  # the cluster's writes stall until a new leader is elected
    etcd3.kill(leader)
    time.sleep(4.0)
    etcd3.restart(leader)
    s.finish("dependencies: roots", timeout=60)
    end_ms = time.time_ns() // 1_000_000 - 2000
    # From two seconds after a child's first run (its parents' owners learned of it by
    # then) to the end, every root fire must reach it.
    expected = expected_fires({j: t + 2000 for j, t in first.items()}, end_ms)
    left = wait_for(
        lambda: missing(ledger, expected), lambda m: not m,
        timeout=60, what=f"every dependent's run of every root fire (of {len(expected)})",
    )  # fmt: skip
    assert not left
    time.sleep(1.0)
    report = verify(ledger, expected, s.worker_kills)
    per_job: dict[str, int] = defaultdict(int)
    for job, _ in expected:
        per_job[job] += 1
    print(report.summary("dependencies: children", failover_s=f"{failover_s:.1f}"))
    assert report.ok, report.failure()
    assert not _too_early(ledger, parents)[:5]
    assert min(per_job.values()) >= 5, per_job  # the faults were inside what was checked
    # Nothing left behind: a run left PENDING after its effect would starve its children.
    s.assert_settled(end_ms)

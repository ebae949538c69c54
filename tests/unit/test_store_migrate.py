"""``store.migrate_ids`` (``schedd store migrate``) on the memory store: a format 1 store's
jobs whose chosen ids are not scoped by their tenant move, every record with them, to their
format 2 ids; what a worker may hold keeps its id."""

from __future__ import annotations

from schedd._clock import ManualClock
from schedd.model import execution_id, new_job_id, validate_new_job
from schedd.store import (
    FIRE,
    JobStore,
    Keys,
    KeyValue,
    MemoryKV,
    migrate_ids,
    needs_scoping,
    partition_of,
    prefix_end,
)
from schedd.v1 import execution_pb2, job_pb2

NOW = 1_700_000_000_000
P = 4


def _legacy(job_id: str, tenant: str, name: str, idem: str = "") -> job_pb2.Job:
    """A job as format 1 stored it: the client's id as given."""
    spec = job_pb2.Job(
        tenant=tenant,
        name=name,
        idempotency_key=idem,
        schedule=job_pb2.Schedule(expr="@every 1h", timezone="UTC"),
        handler=job_pb2.HandlerTarget(name="noop", queue="q"),
    )
    return validate_new_job(spec, now_ms=NOW, id_factory=lambda: job_id)


async def _all(kv: MemoryKV, keys: Keys) -> list[KeyValue]:
    kvs, _ = await kv.range_all(keys.prefix, prefix_end(keys.prefix))
    return kvs


async def _store() -> tuple[MemoryKV, Keys, JobStore, dict[str, job_pb2.Job]]:
    kv, keys = MemoryKV(clock=ManualClock(NOW)), Keys(b"/t/")
    jobs = JobStore(kv, keys, partitions=P)
    made = {}
    for job in (
        _legacy("nightly", "acme", "nightly", idem="k1"),  # renamed: acme:nightly
        _legacy("busy", "acme", "busy"),  # has a claimed run: kept
        _legacy("acme:ok", "acme", "ok"),  # scoped already
        _legacy(new_job_id(), "acme", "generated"),  # generated: unique anyway
        _legacy("plain", "default", "plain"),  # the default tenant's: no prefix
        _legacy("bolt:x", "default", "squat"),  # default, in bolt's namespace: default:bolt:x
    ):
        [(stored, created)] = await jobs.create_jobs([job], NOW)  # type: ignore[misc]
        assert created
        made[stored.name] = stored
    nightly = made["nightly"]
    await jobs.add_runs(nightly, [NOW + 5], execution_pb2.TRIGGER_MANUAL, NOW)  # waiting
    await kv.put(keys.ckpt_key(nightly.partition, "nightly", NOW + 5), b"ckpt")
    dead = execution_pb2.Execution(
        id=execution_id("nightly", NOW - 10), job_id="nightly", tenant="acme",
        scheduled_ms=NOW - 10, state=execution_pb2.EXECUTION_DEAD, partition=nightly.partition,
    )  # fmt: skip
    await kv.put(keys.dlq_key("acme", "nightly", NOW - 10), dead.SerializeToString())
    busy = made["busy"]
    claimed = execution_pb2.Execution(
        id=execution_id("busy", NOW), job_id="busy", tenant="acme", scheduled_ms=NOW,
        state=execution_pb2.EXECUTION_RUNNING, partition=busy.partition,
    )  # fmt: skip
    await kv.put(keys.run_key(busy.partition, "busy", NOW), claimed.SerializeToString())
    return kv, keys, jobs, made


async def test_jobs_move_with_every_record_to_their_scoped_ids() -> None:
    kv, keys, jobs, made = await _store()
    summary = await migrate_ids(kv, keys, P)
    assert summary.renamed == {"nightly": "acme:nightly", "bolt:x": "default:bolt:x"}
    assert list(summary.kept) == ["busy"] and "busy@" in summary.kept["busy"]
    assert not summary.failed
    everything = [kv.key for kv in await _all(kv, keys) if b"/names/" not in kv.key]
    assert not [k for k in everything if b"/nightly" in k or b"/bolt:x" in k]
    new, p = "acme:nightly", partition_of("acme:nightly", P)
    job = await jobs.get_job(new)
    assert (job.id, job.partition, job.name) == (new, p, "nightly")
    assert job.next_fire_ms == made["nightly"].next_fire_ms
    [run] = await jobs.list_live(new)
    assert (run.id, run.job_id, run.partition) == (f"{new}@{NOW + 5}", new, p)
    assert await kv.get(keys.ckpt_key(p, new, NOW + 5)) is not None
    [entry_fire, entry_run] = sorted(
        (keys.parse_due_key(kv.key), kv.value)
        for kv in (await kv.range_all(keys.due_prefix(p), prefix_end(keys.due_prefix(p))))[0]
        if keys.parse_due_key(kv.key)[2] == new
    )
    assert {entry_fire[1][:1], entry_run[1][:1]} == {FIRE.encode(), b"r"}
    [dead] = await jobs.list_dead("acme", new)
    assert dead.id == f"{new}@{NOW - 10}"
    assert (await jobs.find_by_name("acme", "nightly")).id == new
    idem = await kv.get(keys.idem_key("acme", "k1"))
    assert idem is not None and idem.value == new.encode()
    assert await kv.get(keys.tenant_job_key("acme", new)) is not None
    assert await kv.get(keys.tenant_job_key("acme", "nightly")) is None
    assert (await jobs.get_job("default:bolt:x")).name == "squat"
    for kept in ("busy", "acme:ok", "plain"):
        assert (await jobs.get_job(kept)).id == kept


async def test_a_dry_run_changes_nothing_and_a_second_run_finds_nothing() -> None:
    kv, keys, _, _ = await _store()
    before = [(kv.key, kv.value) for kv in await _all(kv, keys)]
    dry = await migrate_ids(kv, keys, P, dry_run=True)
    assert set(dry.renamed) == {"nightly", "bolt:x"}
    assert [(kv.key, kv.value) for kv in await _all(kv, keys)] == before
    await migrate_ids(kv, keys, P)
    again = await migrate_ids(kv, keys, P)
    assert not again.renamed and list(again.kept) == ["busy"]


async def test_the_kept_job_moves_once_its_execution_is_gone() -> None:
    kv, keys, jobs, made = await _store()
    await migrate_ids(kv, keys, P)
    await kv.delete(keys.run_key(made["busy"].partition, "busy", NOW))  # it finished
    summary = await migrate_ids(kv, keys, P)
    assert summary.renamed == {"busy": "acme:busy"} and not summary.kept
    assert (await jobs.get_job("acme:busy")).name == "busy"


def test_which_ids_need_scoping() -> None:
    assert needs_scoping("nightly", "acme") and needs_scoping("a:b", "default")
    assert not needs_scoping("acme:n", "acme") and not needs_scoping("plain", "default")
    assert not needs_scoping("default:a:b", "default")
    assert not needs_scoping(new_job_id(), "acme")

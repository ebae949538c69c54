"""Idempotent triggers on the memory store: the key's record is written in the run's own
transaction, a repeat creates nothing, another payload is refused, a record expires (read as
absent, then swept a page at a time), and deleting the job deletes its records."""

from __future__ import annotations

import pytest

from schedd._clock import ManualClock
from schedd._errors import AlreadyExists
from schedd.model import validate_new_job
from schedd.store import (
    JobStore,
    Keys,
    MemoryKV,
    TriggerKey,
    expire_trigger_keys,
    prefix_end,
)
from schedd.v1 import execution_pb2, job_pb2

NOW = 1_700_000_000_000
TTL = 60_000


async def _store(*tenants: str) -> tuple[MemoryKV, Keys, JobStore, list[job_pb2.Job]]:
    kv, keys = MemoryKV(clock=ManualClock(NOW)), Keys(b"/t/")
    jobs = JobStore(kv, keys, partitions=4)
    made = []
    for tenant in tenants or ("acme",):
        spec = job_pb2.Job(
            tenant=tenant,
            name="nightly",
            schedule=job_pb2.Schedule(expr="@every 1h", timezone="UTC"),
            handler=job_pb2.HandlerTarget(name="noop", queue="q"),
        )
        job = validate_new_job(spec, now_ms=NOW, id_factory=lambda t=tenant: f"{t}:nightly")
        [(stored, _)] = await jobs.create_jobs([job], NOW)  # type: ignore[misc]
        made.append(stored)
    return kv, keys, jobs, made


async def _keys_under(kv: MemoryKV, prefix: bytes) -> list[bytes]:
    kvs, _ = await kv.range_all(prefix, prefix_end(prefix))
    return [x.key for x in kvs]


async def test_first_trigger_writes_run_and_key_in_one_revision() -> None:
    kv, keys, jobs, [job] = await _store()
    done = await jobs.trigger(job, NOW, payload=b'{"a":1}', idempotency_key="k1", key_ttl_ms=TTL)
    assert done.created is not None
    ex = done.created
    assert ex.trigger == execution_pb2.TRIGGER_MANUAL and ex.payload_override == b'{"a":1}'
    tkey = keys.trigger_idem_key("acme", job.id, "k1")
    record = await kv.get(tkey)
    run = await kv.get(keys.run_key(job.partition, job.id, ex.scheduled_ms))
    assert record is not None and run is not None
    # One transaction: the record and the run share the revision (the execution's token).
    assert record.mod_revision == run.mod_revision == ex.fencing_token
    assert TriggerKey.decode(record.value).execution_id == ex.id


async def test_repeat_creates_nothing_and_other_payload_is_refused() -> None:
    kv, keys, jobs, [job] = await _store()
    first = await jobs.trigger(job, NOW, payload=b"1", idempotency_key="k1", key_ttl_ms=TTL)
    before = await _keys_under(kv, keys.runs_all_prefix())
    again = await jobs.trigger(job, NOW + 5, payload=b"1", idempotency_key="k1", key_ttl_ms=TTL)
    assert again.created is None and again.execution_id == first.execution_id
    assert await _keys_under(kv, keys.runs_all_prefix()) == before
    with pytest.raises(AlreadyExists, match=r"idempotency_key 'k1'.*different payload"):
        await jobs.trigger(job, NOW + 6, payload=b"2", idempotency_key="k1", key_ttl_ms=TTL)
    # Without a key every trigger makes its own run; another key makes another.
    plain = await jobs.trigger(job, NOW, payload=b"1")
    other = await jobs.trigger(job, NOW, payload=b"1", idempotency_key="k2", key_ttl_ms=TTL)
    assert plain.created is not None and other.created is not None
    assert len({first.execution_id, plain.execution_id, other.execution_id}) == 3
    assert len(await _keys_under(kv, keys.runs_all_prefix())) == 3


async def test_same_key_in_two_tenants_is_two_triggers() -> None:
    _, _, jobs, [a, b] = await _store("acme", "bolt")
    one = await jobs.trigger(a, NOW, idempotency_key="k", key_ttl_ms=TTL)
    two = await jobs.trigger(b, NOW, idempotency_key="k", key_ttl_ms=TTL)
    assert one.created is not None and two.created is not None
    assert one.execution_id != two.execution_id


async def test_expired_key_triggers_again_and_is_swept() -> None:
    kv, keys, jobs, [job] = await _store()
    first = await jobs.trigger(job, NOW, idempotency_key="old", key_ttl_ms=TTL)
    await jobs.trigger(job, NOW + TTL - 1, idempotency_key="young", key_ttl_ms=TTL)
    # Just before the lifetime ends the key still answers; at its end it is forgotten.
    still = await jobs.trigger(job, NOW + TTL - 1, idempotency_key="old", key_ttl_ms=TTL)
    assert still.created is None and still.execution_id == first.execution_id
    later = await jobs.trigger(job, NOW + TTL, idempotency_key="old", key_ttl_ms=TTL)
    assert later.created is not None and later.execution_id != first.execution_id
    # The sweep deletes what is expired only: "old" was rewritten at NOW + TTL, so nothing
    # is yet; past both lifetimes, both go.
    prefix = keys.trigger_idem_prefix()
    assert await expire_trigger_keys(kv, keys, NOW + TTL + 1, TTL) == 0
    assert len(await _keys_under(kv, prefix)) == 2
    assert await expire_trigger_keys(kv, keys, NOW + 2 * TTL - 1, TTL) == 1
    assert await _keys_under(kv, prefix) == [keys.trigger_idem_key("acme", job.id, "old")]
    assert await expire_trigger_keys(kv, keys, NOW + 3 * TTL, TTL) == 1
    assert await _keys_under(kv, prefix) == []


async def test_sweep_pages_and_spares_live_keys() -> None:
    kv, keys, _, [job] = await _store()
    for n in range(10):
        await kv.put(
            keys.trigger_idem_key("acme", job.id, f"k{n}"), TriggerKey("x", NOW, "").encode()
        )
    await kv.put(
        keys.trigger_idem_key("acme", job.id, "fresh"), TriggerKey("y", NOW + TTL, "").encode()
    )
    await kv.put(keys.trigger_idem_key("acme", job.id, "junk"), b"not json")  # reads as expired
    assert await expire_trigger_keys(kv, keys, NOW + TTL, TTL, page=3) == 11
    assert await _keys_under(kv, keys.trigger_idem_prefix()) == [
        keys.trigger_idem_key("acme", job.id, "fresh")
    ]


async def test_delete_job_deletes_its_trigger_keys_only() -> None:
    kv, keys, jobs, [a, b] = await _store("acme", "bolt")
    await jobs.trigger(a, NOW, idempotency_key="k", key_ttl_ms=TTL)
    await jobs.trigger(b, NOW, idempotency_key="k", key_ttl_ms=TTL)
    await jobs.delete_job(a.id, NOW + 1)
    assert await _keys_under(kv, keys.trigger_idem_prefix()) == [
        keys.trigger_idem_key("bolt", b.id, "k")
    ]

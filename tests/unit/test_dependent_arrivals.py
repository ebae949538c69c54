"""The child's owner (``node._part_deps.Depending``) on the memory store, with a fake clock:
what arrived for (child, fire) decides, once: start when every parent succeeded, skip and
tell the grandchildren once one did not, drop what arrived for a deleted child or a skip too
old for a redrive to carry on."""

from __future__ import annotations

from pathlib import Path

from unit.partition_kit import KEYS, config, own

from schedd._clock import ManualClock
from schedd.history import History
from schedd.model import validate_new_job
from schedd.node._part_deps import SKIPPED_KEPT_MS
from schedd.store import ARRIVED_OK, ARRIVED_SKIP, JobStore, MemoryKV, prefix_end
from schedd.v1 import execution_pb2, job_pb2

NOW = 1_700_000_000_000
T = NOW - 5_000


async def _setup(tmp_path: Path) -> tuple[MemoryKV, ManualClock, History, JobStore]:
    clock = ManualClock(NOW)
    kv = MemoryKV(clock=clock)
    jobs = JobStore(kv, KEYS, partitions=1)
    history = History(tmp_path / "h", ttl_ms=86_400_000)
    for name, after in (("root", []), ("p2", ["root"]), ("child", ["root", "p2"])):
        spec = job_pb2.Job(name=name, handler=job_pb2.HandlerTarget(name="h"), after=after)
        if not after:
            spec.schedule.expr = "@every 1h"
        job = validate_new_job(spec, now_ms=NOW, id_factory=lambda n=name: n)
        [(_, made)] = await jobs.create_jobs([job], NOW)  # type: ignore[misc]
        assert made
    grandchild = job_pb2.Job(name="gc", handler=job_pb2.HandlerTarget(name="h"), after=["child"])
    job = validate_new_job(grandchild, now_ms=NOW, id_factory=lambda: "gc")
    await jobs.create_jobs([job], NOW)
    return kv, clock, history, jobs


async def _keys(kv: MemoryKV, prefix: bytes) -> list[bytes]:
    kvs, _ = await kv.range_all(KEYS.prefix + prefix, prefix_end(KEYS.prefix + prefix))
    return [k.key for k in kvs]


async def test_a_child_starts_once_every_parent_succeeded(tmp_path: Path) -> None:
    kv, clock, history, _ = await _setup(tmp_path)
    part = await own(kv, clock, history, config(tmp_path))
    part.window.end = NOW + 60_000
    await kv.put(KEYS.arrive_key(0, "child", T, "root"), ARRIVED_OK)
    await part.settle_arrivals()
    assert not await _keys(kv, b"runs/")  # p2 has not arrived
    await kv.put(KEYS.arrive_key(0, "child", T, "p2"), ARRIVED_OK)
    part.arrived("child", T)
    await part.settle_arrivals()
    run = await kv.get(KEYS.run_key(0, "child", T))
    assert run is not None
    ex = execution_pb2.Execution.FromString(run.value)
    assert (ex.id, ex.trigger) == (f"child@{T}", execution_pb2.TRIGGER_DEPENDENCY)
    assert not await _keys(kv, b"arrive/")  # consumed with the start
    assert any(e.job_id == "child" for e in part.window.entries.values())  # claimed next


async def test_a_skip_is_told_once_and_a_redrive_carries_on(tmp_path: Path) -> None:
    kv, clock, history, _ = await _setup(tmp_path)
    part = await own(kv, clock, history, config(tmp_path))
    await kv.put(KEYS.arrive_key(0, "child", T, "root"), ARRIVED_OK)
    await kv.put(KEYS.arrive_key(0, "child", T, "p2"), ARRIVED_SKIP + b"p2 ended DEAD: boom")
    await part.settle_arrivals()
    told = await kv.get(KEYS.arrive_key(0, "gc", T, "child"))
    assert told is not None and told.value == ARRIVED_SKIP + b"child skipped: p2 ended DEAD: boom"
    revision = told.mod_revision
    part.arrived("child", T)
    await part.settle_arrivals()  # told once
    again = await kv.get(KEYS.arrive_key(0, "gc", T, "child"))
    assert again is not None and again.mod_revision == revision
    await kv.put(KEYS.arrive_key(0, "child", T, "p2"), ARRIVED_OK)  # p2 redriven, succeeded
    part.arrived("child", T)
    await part.settle_arrivals()
    assert await kv.get(KEYS.run_key(0, "child", T)) is not None
    assert not await _keys(kv, b"dskip/0000/child")


async def test_arrivals_of_a_deleted_child_and_of_an_old_skip_are_dropped(tmp_path: Path) -> None:
    kv, clock, history, jobs = await _setup(tmp_path)
    part = await own(kv, clock, history, config(tmp_path))
    await kv.put(KEYS.arrive_key(0, "child", T, "p2"), ARRIVED_SKIP + b"p2 ended DEAD")
    await part.settle_arrivals()
    assert await _keys(kv, b"dskip/")
    clock.advance(SKIPPED_KEPT_MS + 20_000)  # past the keep, and past the next full read
    await part.settle_arrivals()
    assert not await _keys(kv, b"dskip/0000/child") and not await _keys(kv, b"arrive/0000/child")
    await kv.put(KEYS.arrive_key(0, "gc", T, "child"), ARRIVED_OK)
    await jobs.delete_job("gc", NOW)
    part.jobs.pop("gc", None)
    clock.advance(20_000)
    await part.settle_arrivals()
    assert not await _keys(kv, b"arrive/")


async def test_fires_a_root_missed_tell_its_children(tmp_path: Path) -> None:
    """A fire the misfire policy drops (MISSED) tells the children in its claim's write."""
    clock = ManualClock(NOW)
    kv = MemoryKV(clock=clock)
    jobs = JobStore(kv, KEYS, partitions=1)
    spec = job_pb2.Job(
        name="root", handler=job_pb2.HandlerTarget(name="h"),
        schedule=job_pb2.Schedule(expr="@every 10s"),
        misfire=job_pb2.MisfirePolicy(mode=job_pb2.MISFIRE_SKIP),
    )  # fmt: skip
    root = validate_new_job(spec, now_ms=NOW, id_factory=lambda: "root")
    await jobs.create_jobs([root], NOW)
    child = job_pb2.Job(name="c", handler=job_pb2.HandlerTarget(name="h"), after=["root"])
    await jobs.create_jobs([validate_new_job(child, now_ms=NOW, id_factory=lambda: "c")], NOW)
    history = History(tmp_path / "h", ttl_ms=86_400_000)
    clock.advance(35.0)  # three fires passed while nobody owned the partition
    part = await own(kv, clock, history, config(tmp_path))
    await part.load()
    await part.step()
    arrived = await kv.range_all(KEYS.arrive_prefix(0), prefix_end(KEYS.arrive_prefix(0)))
    values = {KEYS.parse_arrive_key(a.key)[2]: a.value for a in arrived[0]}
    assert len(values) == 3, values
    assert all(v.startswith(ARRIVED_SKIP + b"root ended MISSED") for v in values.values())

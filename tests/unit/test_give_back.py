"""A graceful release gives back only a job's latest undispatched fires, and a schedule fire
whose run exists already is claimed without a second run (the next owner used to spin on its
failing claim until the run ended, then create and run it again)."""

from __future__ import annotations

from schedd._clock import ManualClock
from schedd.model import validate_new_job
from schedd.node._claims import ClaimPlanner
from schedd.node._live import Live, claims_to_give_back
from schedd.store import FIRE, Fence, JobStore, Keys, MemoryKV, PartitionStore
from schedd.v1 import execution_pb2, job_pb2

NOW = 1_700_000_000_000
SCHEDULE, CATCH_UP = execution_pb2.TRIGGER_SCHEDULE, execution_pb2.TRIGGER_CATCH_UP


def _live(job: str, at: int, dispatched: bool = False, trigger: int = SCHEDULE) -> Live:
    ex = execution_pb2.Execution(id=f"{job}@{at}", job_id=job, scheduled_ms=at, trigger=trigger)
    return Live(ex, dispatched=dispatched)


def _given(lives: list[Live]) -> dict[str, list[int]]:
    return {
        job: sorted(lv.ex.scheduled_ms for lv in given)
        for job, given in claims_to_give_back(lives).items()
    }


def test_only_fires_after_every_kept_one_go_back() -> None:
    lives = [
        _live("a", 1, dispatched=True), _live("a", 2), _live("a", 3),  # the suffix goes
        _live("b", 1), _live("b", 2, dispatched=True),  # b@1 stays: b@2 keeps its run
        _live("c", 1), _live("c", 2),  # nothing dispatched: all go
        _live("d", 1), _live("d", 2, trigger=CATCH_UP), _live("d", 3),  # catch-up stays
    ]  # fmt: skip
    assert _given(lives) == {"a": [2, 3], "c": [1, 2], "d": [3]}


def _job(job_id: str) -> job_pb2.Job:
    spec = job_pb2.Job(
        id=job_id,
        name="every minute",
        schedule=job_pb2.Schedule(expr="@every 1m", timezone="UTC"),
        handler=job_pb2.HandlerTarget(name="noop", queue="q"),
    )
    return validate_new_job(spec, now_ms=NOW, id_factory=lambda: "")


async def test_a_fire_whose_run_exists_is_claimed_without_a_second_run() -> None:
    kv, keys = MemoryKV(clock=ManualClock(NOW)), Keys(b"/t/")
    jobs = JobStore(kv, keys, partitions=1)
    await jobs.create_jobs([_job("j1")], NOW)
    owner = keys.owner_key(0)
    store = PartitionStore(kv, keys, Fence(0, owner, await kv.put(owner, b"n")))
    planner = ClaimPlanner(store, grace_ms=1_000)
    [entry], _ = await store.load_due(NOW + 3_600_000)
    assert entry.kind == FIRE
    due_key, state_key = keys.due_key(0, entry.due_ms, "j1"), keys.state_key("j1")
    due_before, state_before = await kv.get(due_key), await kv.get(state_key)
    assert due_before is not None and state_before is not None
    cached = (await store.fetch_jobs(["j1"]))["j1"]
    now = entry.due_ms
    ok = (await store.apply([planner.plan(entry, cached, None, now).item])).ok
    assert ok == [True]
    run_key = keys.run_key(0, "j1", entry.scheduled_ms)
    run = await kv.get(run_key)
    assert run is not None
    # The cursor is moved back onto that fire while its run lives (what a give-back of an
    # earlier fire did).
    moved = (await store.fetch_jobs(["j1"]))["j1"].state.due_ms
    await kv.delete(keys.due_key(0, moved, "j1"))
    await kv.put(due_key, due_before.value)
    await kv.put(state_key, state_before.value)
    [again], _ = await store.load_due(NOW + 3_600_000)
    assert (again.kind, again.scheduled_ms) == (FIRE, entry.scheduled_ms)
    cached = (await store.fetch_jobs(["j1"]))["j1"]
    ok = (await store.apply([planner.plan(again, cached, None, now).item])).ok
    assert ok == [False]  # creating the run again fails its compare
    existing = await store.get_runs([("j1", again.scheduled_ms)])
    claim = planner.plan(again, cached, existing[("j1", again.scheduled_ms)], now)
    assert claim.executions == []
    ok = (await store.apply([claim.item])).ok
    assert ok == [True]
    after = await kv.get(run_key)
    assert after is not None and after.mod_revision == run.mod_revision  # untouched
    [nxt], _ = await store.load_due(NOW + 3_600_000)
    assert nxt.scheduled_ms > again.scheduled_ms  # the cursor moved past it

"""The node's run history (real RocksDB): list order, keyset pages, the s/ index built for old
data, and pruning, at start and on a timer driven by a manual clock."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from rocksdict import Options, Rdict

from schedd._clock import ManualClock
from schedd.history import History, HistoryPruner, Position, list_order
from schedd.v1 import execution_pb2

SUCCEEDED = execution_pb2.EXECUTION_SUCCEEDED
FAILED = execution_pb2.EXECUTION_FAILED


def _ex(
    job: str, sched: int, finished: int, state: int = SUCCEEDED, tenant: str = "t"
) -> execution_pb2.Execution:
    return execution_pb2.Execution(
        id=f"{job}@{sched}",
        job_id=job,
        tenant=tenant,
        scheduled_ms=sched,
        finished_ms=finished,
        state=state,  # type: ignore[arg-type]
    )


def _ids(rows: list[execution_pb2.Execution]) -> list[str]:
    return [r.id for r in rows]


def test_list_is_newest_scheduled_first_then_id(tmp_path: Path) -> None:
    h = History(tmp_path / "h")
    try:
        h.record([_ex("b", 100, 5), _ex("a", 100, 9), _ex("a", 300, 1), _ex("c", 200, 2)])
        assert _ids(h.list()) == ["a@300", "c@200", "a@100", "b@100"]
        assert _ids(h.list(job_id="a")) == ["a@300", "a@100"]
        rows = h.list()
        assert rows == sorted(rows, key=list_order)
    finally:
        h.close()


def test_pages_resume_after_the_cursor_without_gaps_or_repeats(tmp_path: Path) -> None:
    h = History(tmp_path / "h")
    try:
        h.record([_ex(j, s, s) for j in ("a", "b", "c") for s in range(1000, 1010)])
        seen: list[str] = []
        cursor: Position | None = None
        while True:
            page = h.page(after=cursor, limit=7)
            if not page:
                break
            seen += _ids(page)
            cursor = Position.of(page[-1])
        assert seen == _ids(h.list(limit=100))
        assert len(seen) == len(set(seen)) == 30
        # A cursor in the middle of one scheduled time (b@1005): c@1005 follows, then 1004.
        assert _ids(h.page(after=Position(1005, "b@1005"), limit=2)) == ["c@1005", "a@1004"]
        assert _ids(h.page(job_id="b", after=Position(1005, "b@1005"), limit=2)) == [
            "b@1004",
            "b@1003",
        ]
    finally:
        h.close()


def test_filters_and_a_job_id_prefix_of_another(tmp_path: Path) -> None:
    h = History(tmp_path / "h")
    try:
        h.record([_ex("a", 1, 1), _ex("a/b", 2, 2), _ex("a", 3, 3, FAILED, tenant="u")])
        assert _ids(h.page(job_id="a")) == ["a@3", "a@1"]
        assert _ids(h.page(states=[FAILED])) == ["a@3"]
        assert _ids(h.page(tenant="t")) == ["a/b@2", "a@1"]
    finally:
        h.close()


def test_history_written_before_the_s_index_gets_it_at_open(tmp_path: Path) -> None:
    path = tmp_path / "h"
    path.mkdir()
    db = Rdict(str(path), Options(raw_mode=True))
    for ex in (_ex("a", 5, 5), _ex("b", 7, 7)):
        db[b"e/" + ex.id.encode()] = ex.SerializeToString()
        db[b"t/%013d/%s" % (ex.finished_ms, ex.id.encode())] = b""
    db.close()
    h = History(path)
    try:
        assert _ids(h.list()) == ["b@7", "a@5"]
    finally:
        h.close()


def test_prune_deletes_what_is_older_than_the_ttl_and_its_index_entries(tmp_path: Path) -> None:
    h = History(tmp_path / "h", ttl_ms=1000)
    try:
        h.record([_ex("a", 1, 100), _ex("a", 2, 1500), _ex("b", 3, 400)])
        assert h.prune(2000) == 2  # finished before 1000
        assert _ids(h.list()) == ["a@2"]
        assert _ids(h.list(job_id="b")) == []
        assert h.get("a@1") is None
        assert h.prune(2000) == 0
    finally:
        h.close()


def test_a_re_recorded_execution_is_pruned_by_its_latest_finish(tmp_path: Path) -> None:
    h = History(tmp_path / "h", ttl_ms=1000)
    try:
        h.record([_ex("a", 1, 100)])
        h.record([_ex("a", 1, 1800)])
        h.prune(2000)
        assert _ids(h.list()) == ["a@1"]
    finally:
        h.close()


async def test_the_pruner_prunes_on_its_timer_not_only_once(tmp_path: Path) -> None:
    clock = ManualClock(10_000)
    h = History(tmp_path / "h", ttl_ms=5_000)
    pruner = HistoryPruner(h, clock, interval_s=60)
    task = asyncio.create_task(pruner.run())
    try:
        h.record([_ex("a", 1, 9_000), _ex("b", 2, 68_000)])
        await asyncio.sleep(0)
        clock.advance(30)  # 40 s: a finished 31 s ago, but no prune is due yet
        await asyncio.sleep(0)
        assert _ids(h.list()) == ["b@2", "a@1"]
        clock.advance(30)  # 70 s: the first timed prune
        for _ in range(5):
            await asyncio.sleep(0)
        assert _ids(h.list()) == ["b@2"]
        assert pruner.pruned == 1
        clock.advance(60)  # 130 s: b (finished at 68 s) is past the 5 s retention too
        for _ in range(5):
            await asyncio.sleep(0)
        assert _ids(h.list()) == []
        assert pruner.pruned == 2
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        h.close()


async def test_a_large_backlog_is_pruned_in_slices(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import schedd.history._pruner as pruner_mod

    monkeypatch.setattr(pruner_mod, "PRUNE_SLICE", 3)
    clock = ManualClock(100_000)
    h = History(tmp_path / "h", ttl_ms=1000)
    try:
        h.record([_ex("a", s, s) for s in range(1, 11)])
        assert await HistoryPruner(h, clock, interval_s=1).prune_now() == 10
        assert h.list() == []
    finally:
        h.close()


def test_a_record_written_again_is_pruned_by_its_latest_finish_only(tmp_path: Path) -> None:
    h = History(tmp_path / "h", ttl_ms=1000)
    try:
        h.record([_ex("a", 100, 500)])
        h.record([_ex("a", 100, 5000)])  # finished again later (a redelivered attempt)
        h.record([_ex("b", 100, 600)])
        # At 2000 the first finish is past the TTL, the second is not: the stale entry goes,
        # the record stays; b goes.
        assert h.prune(2000) == 2
        assert _ids(h.list()) == ["a@100"]
        got = h.get("a@100")
        assert got is not None and got.finished_ms == 5000
        assert h.prune(6001) == 1
        assert h.list() == [] and h.get("a@100") is None
    finally:
        h.close()

"""Supervised loops restart after a crash; notices reach the partitions they name (pure)."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from schedd._clock import ManualClock
from schedd._supervise import supervised
from schedd.node._live import OwnedPartitions
from schedd.node._notify import NotifyWatcher
from schedd.store import FIRE, Keys, MemoryKV, Notice


async def _settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def test_a_crashing_loop_is_logged_and_restarted_after_its_pause(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = ManualClock(0)
    runs: list[int] = []
    stop = False

    async def loop() -> None:
        runs.append(clock.now_ms())
        if len(runs) == 1:
            raise RuntimeError("injected")
        if len(runs) == 2:
            return  # ends without being asked to: restarted as well
        await asyncio.Event().wait()

    task = asyncio.create_task(supervised("probe", loop, clock=clock, stopping=lambda: stop))
    await _settle()
    assert runs == [0]
    assert "probe crashed" in caplog.text and "RuntimeError: injected" in caplog.text
    clock.advance(0.5)
    await _settle()
    assert runs == [0], "restarts wait restart_s on the clock"
    clock.advance(0.5)
    await _settle()
    assert runs == [0, 1000]
    assert "probe ended unexpectedly" in caplog.text
    clock.advance(1.0)
    await _settle()
    assert runs == [0, 1000, 2000]
    stop = True
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_a_loop_that_fails_while_stopping_is_not_restarted(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = ManualClock(0)
    stop = False
    runs = 0

    async def loop() -> None:
        nonlocal stop, runs
        runs += 1
        stop = True
        raise RuntimeError("while stopping")

    with caplog.at_level(logging.ERROR, logger="schedd._supervise"):
        await asyncio.wait_for(supervised("x", loop, clock=clock, stopping=lambda: stop), 1)
    assert runs == 1 and "crashed" not in caplog.text


class _Partition:
    def __init__(self, number: int) -> None:
        self.partition = number
        self.pacer: Any = type("P", (), {"partitions_owned": 1})()
        self.created: list[Any] = []
        self.doubted: list[str] = []
        self.reloads = 0

    def add_created(self, entries: list[Any]) -> None:
        self.created += entries

    def doubt(self, job_ids: list[str]) -> None:
        self.doubted += job_ids

    def request_reload(self) -> None:
        self.reloads += 1


def test_notices_reach_the_partition_they_name() -> None:
    table = OwnedPartitions(4)
    part = _Partition(2)
    table.add(part)  # type: ignore[arg-type]
    watcher = NotifyWatcher(MemoryKV(clock=ManualClock(0)), Keys(b"/t/"), table, ManualClock(0))
    created = Notice(["j-u"], [("j-c", 5_000, 4_990)]).encode()
    watcher.notified(2, created, revision=77)
    assert [(e.job_id, e.due_ms, e.scheduled_ms, e.kind, e.mod_revision) for e in part.created] == [
        ("j-c", 5_000, 4_990, FIRE, 77)
    ]
    assert part.doubted == ["j-u"]
    watcher.notified(3, created, revision=78)  # a partition this node does not run
    assert len(part.created) == 1
    watcher.notified(2, Notice([f"j-{i}" for i in range(500)]).encode(), revision=79)
    watcher.notified(2, b"{not json", revision=80)
    assert part.reloads == 2, "too many ids, and an unreadable notice, reload the window"

"""EagerTask: an asyncio task whose first step runs in its constructor."""

from __future__ import annotations

import asyncio
import contextvars
import types
from collections.abc import Generator
from typing import Any

import pytest

from schedd.worker import PermanentError
from schedd.worker._eager import EagerTask

VAR: contextvars.ContextVar[str] = contextvars.ContextVar("VAR", default="outer")


def _eager(coro: Any) -> EagerTask:
    return EagerTask(coro, asyncio.get_running_loop())


async def test_a_coroutine_that_returns_is_done_before_the_constructor_returns() -> None:
    seen: list[object] = []

    async def handler() -> int:
        seen.append(asyncio.current_task())
        return 42

    outer = asyncio.current_task()
    task = _eager(handler())
    assert task.done() and task.result() == 42
    assert task.returned_eagerly and task.eager_value == 42
    assert seen == [task]  # the handler ran as its own task ...
    assert asyncio.current_task() is outer  # ... and the caller's task is back
    assert task not in asyncio.all_tasks()


async def test_exceptions_and_cancellation_of_the_first_step() -> None:
    async def fails() -> None:
        raise PermanentError("bad input")

    async def cancels() -> None:
        raise asyncio.CancelledError

    async def cancels_itself() -> str:
        task = asyncio.current_task()
        assert task is not None
        task.cancel()
        return "ignored"

    failed = _eager(fails())
    assert failed.done() and isinstance(failed.exception(), PermanentError)
    assert not failed.returned_eagerly
    assert _eager(cancels()).cancelled()
    assert _eager(cancels_itself()).cancelled()  # as an asyncio.Task would end


async def test_a_coroutine_that_suspends_finishes_through_the_loop_as_the_same_task() -> None:
    loop = asyncio.get_running_loop()
    gate: asyncio.Future[str] = loop.create_future()
    seen: list[object] = []

    async def handler() -> str:
        seen.append(asyncio.current_task())
        value = await gate
        await asyncio.sleep(0)  # a bare yield too
        seen.append(asyncio.current_task())
        return value.upper()

    task = _eager(handler())
    assert not task.done() and task in asyncio.all_tasks() and not task.returned_eagerly
    gate.set_result("ok")
    assert await task == "OK"
    assert seen == [task, task]


async def test_cancel_while_suspended_reaches_the_coroutine() -> None:
    cleaned = asyncio.Event()

    async def handler() -> None:
        try:
            await asyncio.sleep(3600)
        finally:
            cleaned.set()

    task = _eager(handler())
    assert not task.done()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert task.cancelled() and cleaned.is_set()


async def test_asyncio_timeout_entered_in_the_first_step_cancels_this_task_only() -> None:
    async def handler() -> str:
        try:
            async with asyncio.timeout(0.01):
                await asyncio.sleep(3600)
        except TimeoutError:
            return "timed out"
        return "not reached"

    outer = asyncio.current_task()
    assert outer is not None
    task = _eager(handler())
    assert await task == "timed out"
    assert not outer.cancelling()  # the caller's task was never the timeout's target


async def test_task_group_in_a_handler() -> None:
    async def child(n: int) -> int:
        await asyncio.sleep(0)
        return n * 2

    async def handler() -> list[int]:
        async with asyncio.TaskGroup() as tg:
            kids = [tg.create_task(child(n)) for n in range(3)]
        return [k.result() for k in kids]

    assert await _eager(handler()) == [0, 2, 4]


async def test_context_variables_stay_inside_the_task() -> None:
    async def handler() -> str:
        VAR.set("inner")
        await asyncio.sleep(0)
        return VAR.get()

    task = _eager(handler())
    assert VAR.get() == "outer"
    assert await task == "inner"
    assert VAR.get() == "outer"


async def test_a_bad_yield_fails_the_task() -> None:
    @types.coroutine
    def bad() -> Generator[Any, None, None]:
        yield "not a future"

    async def handler() -> None:
        await bad()

    task = _eager(handler())
    with pytest.raises(RuntimeError, match="bad yield"):
        await task

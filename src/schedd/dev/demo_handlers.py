"""Handlers for ``schedd dev`` and the tests: ``echo``, ``sleep``, ``fail``, ``flaky``.

Load them with ``schedd worker --import schedd.dev.demo_handlers``.
"""

from __future__ import annotations

import asyncio
from typing import Any

from schedd.worker import Context, Worker


async def echo(ctx: Context, payload: Any) -> Any:
    """Return the payload unchanged."""
    return payload


async def sleep(ctx: Context, payload: Any) -> dict[str, float]:
    """Sleep ``payload["seconds"]`` (heartbeating each second), stopping early if cancelled.

    Returns ``{"slept": seconds}``; a cancelled run ends as OUTCOME_CANCELLED.
    """
    seconds = float(payload.get("seconds", 1.0)) if isinstance(payload, dict) else 1.0
    loop = asyncio.get_running_loop()
    end = loop.time() + seconds
    while (left := end - loop.time()) > 0:
        if ctx.cancelled:
            raise asyncio.CancelledError(ctx.cancel_reason)
        await asyncio.sleep(min(1.0, left))
        await ctx.heartbeat()
    return {"slept": seconds}


async def fail(ctx: Context, payload: Any) -> None:
    """Always raise (a retryable failure)."""
    raise RuntimeError(f"fail handler asked to fail (attempt {ctx.attempt})")


async def flaky(ctx: Context, payload: Any) -> dict[str, int]:
    """Fail while ``ctx.attempt <= payload["failures"]``, then return ``{"attempt": n}``."""
    failures = int(payload.get("failures", 1)) if isinstance(payload, dict) else 1
    if ctx.attempt <= failures:
        raise RuntimeError(f"flaky: attempt {ctx.attempt} of {failures} planned failures")
    return {"attempt": ctx.attempt}


def register(worker: Worker) -> None:
    """Register the demo handlers on ``worker``."""
    worker.add_handler("echo", echo)
    worker.add_handler("sleep", sleep)
    worker.add_handler("fail", fail)
    worker.add_handler("flaky", flaky)

"""Handlers for the checkpoint tests (`schedd worker --import jobs.ckpt_handlers`): ``count``
counts from its checkpoint to 30, saving a checkpoint at every step and logging each step to
``$SCHEDD_CKPT_LOG`` as ``worker attempt value``."""

from __future__ import annotations

import asyncio
import os
from typing import Any

from schedd.worker import Context, Worker


def register(worker: Worker) -> None:
    log_path = os.environ["SCHEDD_CKPT_LOG"]
    name = os.environ.get("SCHEDD_WORKER_NAME", "?")

    @worker.handler("count")
    async def count(ctx: Context, payload: Any) -> Any:
        start = ctx.load_checkpoint() or 0
        for value in range(int(start), 30):
            with open(log_path, "a") as f:  # noqa: ASYNC230 - a test log line
                f.write(f"{name} {ctx.attempt} {value}\n")
            ctx.save_checkpoint(value + 1)
            await ctx.heartbeat()
            await asyncio.sleep(0.2)
        return {"counted_from": start}

    @worker.handler("huge")
    async def huge(ctx: Context, payload: Any) -> Any:
        ctx.save_checkpoint("x" * (1 << 20))  # refused: too large
        return "unreachable"

"""Handlers for the tenant herd test (`schedd worker --import jobs.herd_handlers`): ``mark``
appends ``execution-id tenant start-ns`` to ``$SCHEDD_HERD_LOG`` when it starts."""

from __future__ import annotations

import os
import time
from typing import Any

from schedd.worker import Context, Worker


def register(worker: Worker) -> None:
    log = open(os.environ["SCHEDD_HERD_LOG"], "a", buffering=1 << 16)  # noqa: SIM115 - lives with the worker

    @worker.handler("mark")
    async def mark(ctx: Context, payload: Any) -> Any:
        log.write(f"{ctx.execution_id} {ctx.tenant} {time.time_ns()}\n")
        log.flush()
        return None

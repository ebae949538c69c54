"""Handlers for the cluster tests' worker processes: ``schedd worker --import effect_handlers``.

``effect`` records its start in the effect ledger (``SCHEDD_EFFECTS_DB``), works for
``payload["work_ms"]`` (heartbeating), then writes its effect through the fenced sink with
the attempt's current fencing token. A refused write (a newer attempt already wrote) fails
the attempt permanently: it is a zombie, and its result is refused by the node anyway.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

from cluster.effects import EffectLedger

from schedd.worker import Context, PermanentError, Worker


def register(worker: Worker) -> None:
    ledger = EffectLedger(os.environ["SCHEDD_EFFECTS_DB"])
    name = os.environ.get("SCHEDD_WORKER_NAME", "worker")

    @worker.handler("effect")
    async def effect(ctx: Context, payload: Any) -> dict[str, int]:
        await record_start(ledger, ctx, name)
        work_s = (payload or {}).get("work_ms", 0) / 1000.0 if isinstance(payload, dict) else 0.0
        loop = asyncio.get_running_loop()
        end = loop.time() + work_s
        while (left := end - loop.time()) > 0:
            await asyncio.sleep(min(0.5, left))
            await ctx.heartbeat()
        return await write_effect(ledger, ctx, name)


async def record_start(ledger: EffectLedger, ctx: Context, worker: str) -> None:
    """An attempt began (in the ledger's ``attempts``)."""
    await asyncio.to_thread(
        ledger.started,
        ctx.execution_id,
        ctx.job_id,
        ctx.scheduled_ms,
        ctx.fencing_token,
        worker,
        ctx.started_ms,
    )


async def write_effect(ledger: EffectLedger, ctx: Context, worker: str) -> dict[str, int]:
    """The attempt's effect through the fenced sink; a refused write (a newer attempt wrote)
    fails the attempt for good."""
    accepted = await asyncio.to_thread(
        ledger.put, ctx.job_id, ctx.scheduled_ms, ctx.fencing_token, worker
    )
    if not accepted:
        raise PermanentError(f"stale token {ctx.fencing_token}: a newer attempt wrote")
    return {"token": ctx.fencing_token}

"""Handlers for the downstream-fault tests (``schedd worker --import jobs.flaky_handlers``).

``flaky`` stands for a handler whose downstream is out for a while: it records its start in
the effect ledger (``$SCHEDD_EFFECTS_DB``), raises while the file ``payload["down_file"]``
exists, and otherwise writes its effect through the ledger's fenced sink with the attempt's
token (a refused write fails the attempt for good: a newer attempt wrote).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from cluster.effect_handlers import record_start, write_effect
from cluster.effects import EffectLedger

from schedd.worker import Context, Worker


def register(worker: Worker) -> None:
    ledger = EffectLedger(os.environ["SCHEDD_EFFECTS_DB"])
    name = os.environ.get("SCHEDD_WORKER_NAME", "worker")

    @worker.handler("flaky")
    async def flaky(ctx: Context, payload: Any) -> dict[str, int]:
        await record_start(ledger, ctx, name)
        if Path(payload["down_file"]).exists():
            raise RuntimeError("the downstream service is unavailable")
        return await write_effect(ledger, ctx, name)

"""The schedd worker SDK: register handlers, run them for the nodes, exactly once in effect.

::

    from schedd.worker import Context, Worker, WorkerConfig

    worker = Worker(["10.0.0.1:7070", "10.0.0.2:7070"], queues=["default"], data_dir="/var/lib/w")
    # the same, typed: Worker(WorkerConfig(endpoints=("10.0.0.1:7070", "10.0.0.2:7070"), ...))

    @worker.handler("echo")
    async def echo(ctx: Context, payload: object) -> object:
        return payload

    worker.run_sync()
"""

from schedd.worker._config import WorkerConfig
from schedd.worker._context import CheckpointTooLarge, Context, PermanentError
from schedd.worker._fenced import FencedStore, StaleWrite
from schedd.worker._worker import Worker

__all__ = [
    "CheckpointTooLarge",
    "Context",
    "FencedStore",
    "PermanentError",
    "StaleWrite",
    "Worker",
    "WorkerConfig",
]

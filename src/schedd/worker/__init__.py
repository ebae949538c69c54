"""The schedd worker SDK: register handlers, run them for the nodes, exactly once in effect.

::

    from schedd.worker import Context, Worker, WorkerConfig

    worker = Worker(["10.0.0.1:7070", "10.0.0.2:7070"], queues=["default"], data_dir="/var/lib/w")
    # the same, typed: Worker(WorkerConfig(endpoints=("10.0.0.1:7070", "10.0.0.2:7070"), ...))

    @worker.handler("echo")
    async def echo(ctx: Context, payload: object) -> object:
        return payload

    worker.run_sync()

Or, inside a program that runs its own event loop::

    async with Worker("10.0.0.1:7070", queues=["default"], data_dir="/var/lib/w") as worker:
        ...  # started; stopped gracefully when the block ends (at once if it raised)

``__all__`` is the public face. The names imported below it with ``as`` are for schedd's own
packages: the executor seam (:class:`Executor`, :class:`Outcome`, :class:`Runtime` and the
http and shell executors with their configs), the ledger and thread bridge the test harness
(``schedd.testing``) drives, and :func:`run_worker_from_cli` behind ``schedd worker``. Other
packages import them from here, never from the underscore modules.
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

# For schedd's own packages (cli, dev, testing), not part of the public face above.
from schedd.worker._cli import parse_connect as parse_connect
from schedd.worker._cli import run_worker_from_cli as run_worker_from_cli
from schedd.worker._context import decode_payload as decode_payload
from schedd.worker._executor import Executor as Executor
from schedd.worker._executor import Outcome as Outcome
from schedd.worker._executor import Runtime as Runtime
from schedd.worker._executor import error_text as error_text
from schedd.worker._executor import no_executor_error as no_executor_error
from schedd.worker._executor import settle as settle
from schedd.worker._executor import target_kind as target_kind
from schedd.worker._handler import Handler as Handler
from schedd.worker._handler import HandlerExecutor as HandlerExecutor
from schedd.worker._http import HttpConfig as HttpConfig
from schedd.worker._http import HttpExecutor as HttpExecutor
from schedd.worker._ledger import Ledger as Ledger
from schedd.worker._shell import ShellConfig as ShellConfig
from schedd.worker._shell import ShellExecutor as ShellExecutor
from schedd.worker._threads import ThreadBridge as ThreadBridge

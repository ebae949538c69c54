"""How a worker tells of results its nodes refused: once loudly, then quietly.

A node refuses a result it will not settle (a stale fencing token, an execution it cancelled
or no longer has). The worker does not send it again (the ledger keeps it; the node hands
the execution out again if it still should run, and the ledger answers), so a refusal is
only worth telling, and an execution refused again and again must not flood the log.
"""

from __future__ import annotations

import logging
from collections import OrderedDict

from schedd.v1 import worker_pb2

log = logging.getLogger("schedd.worker._worker")

#: Executions whose refused result is not worth a warning (said once already, or cancelled
#: by the node), remembered at most.
REFUSALS_REMEMBERED = 10_000


class RefusalLog:
    """Logs each refusal: at warning level the first time for an execution, at debug level
    after that, and only at debug level for an execution made :meth:`quiet` beforehand (the
    node cancelled it: its CANCELLED result is refused as stale, as expected). It remembers
    the last :data:`REFUSALS_REMEMBERED` executions."""

    def __init__(self, remembered: int = REFUSALS_REMEMBERED) -> None:
        self._quiet: OrderedDict[str, None] = OrderedDict()
        self._remembered = remembered

    def refused(self, ack: worker_pb2.ResultAck) -> None:
        """A node refused the result ``ack`` names."""
        first = ack.execution_id not in self._quiet
        self.quiet(ack.execution_id)
        log.log(
            logging.WARNING if first else logging.DEBUG,
            "node refused result of %s (token %d, code %d): %s; not sending it again%s",
            ack.execution_id,
            ack.fencing_token,
            ack.code,
            ack.message,
            "; further refusals of it are logged at debug level" if first else "",
            extra={"execution": ack.execution_id, "token": ack.fencing_token},
        )

    def quiet(self, execution_id: str) -> None:
        """A refusal of this execution's result is said at debug level from now on (one was
        said already, or the node itself cancelled it)."""
        quiet = self._quiet
        if execution_id not in quiet:
            quiet[execution_id] = None
            if len(quiet) > self._remembered:
                quiet.popitem(last=False)

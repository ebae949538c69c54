"""The node's promise to workers that hold its executions: "I hold my fences until T".

A worker starts an execution it holds for a later instant only if that instant is before the
latest promise of the node that sent it (``NodeBatch.live_until_ms``); otherwise it gives the
execution back unstarted. The node promises the instant its session stops acting (its
self-fencing instant, see ``schedd.coord.Session.may_act``), renewed with every reaper tick;
a node that froze or lost etcd stops renewing, so its held work does not start beside the new
owner's.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from schedd._clock import Clock
from schedd.dispatch._session import WorkerSession

#: What a dispatcher without a node session promises: no limit (a year ahead).
UNLIMITED_MS = 365 * 86_400_000


def unlimited(clock: Clock) -> Callable[[], int]:
    """The promise of a dispatcher that is not tied to a session: always a year ahead."""
    return lambda: clock.now_ms() + UNLIMITED_MS


def vouch(sessions: Iterable[WorkerSession], live_until_ms: int, now_ms: int) -> None:
    """Sends the promise to every open stream of a worker that holds executions; nothing once
    the promise is in the past (the node is not sure of its lease)."""
    if live_until_ms <= now_ms:
        return
    for s in sessions:
        if not s.closed and not s.silent and s.hello.prefetch > 0:
            s.send_vouch(live_until_ms)

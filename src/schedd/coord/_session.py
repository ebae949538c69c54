"""A lease plus its keep-alive: a node's liveness in etcd (like etcd's concurrency.Session)."""

from __future__ import annotations

import asyncio
import contextlib
import logging

from schedd._clock import Clock, SystemClock
from schedd._errors import Unavailable
from schedd.coord._bounded import within
from schedd.store import KV

log = logging.getLogger(__name__)


class Session:
    """An etcd lease kept alive in the background.

    Keys written with ``lease=session.lease_id`` vanish when the session ends: on
    :meth:`close` (revoke), or when the lease expires because keep-alives stopped reaching
    etcd (process paused, etcd unreachable). :attr:`done` is set as soon as this process
    knows or must assume the lease is gone: etcd reports TTL <= 0 (expired or revoked
    behind our back), or no keep-alive succeeded within the last granted TTL. Once set it
    stays set: a session is never revived; make a new one.

    **Self-fencing.** The owner of the session must stop acting (firing, dispatching) *before*
    the lease can have expired at etcd, not after: :meth:`may_act` is true only until
    ``margin_s`` before the instant the lease must be assumed gone, and :attr:`done` is set
    then too, whether a keep-alive failed or is still hanging. The margin covers the time
    between a check and its effect (a dispatch reaching a worker) and clock-rate error.

    Args:
        kv: the store.
        ttl_s: lease TTL in seconds (>= 2); keep-alives are sent every ``ttl_s / 3``.
        clock: source of monotonic time and sleeps.
        margin_s: how long before the assumed expiry the session gives up (default
            ``max(0.5, ttl_s / 4)``: 1.25 s for the default 5 s TTL).
    """

    def __init__(
        self,
        kv: KV,
        *,
        ttl_s: int = 5,
        clock: Clock | None = None,
        margin_s: float | None = None,
    ) -> None:
        if ttl_s < 2:
            raise ValueError(f"session ttl_s must be >= 2, got {ttl_s}")
        self._kv = kv
        self.ttl_s = ttl_s
        self.margin_s = max(0.5, ttl_s / 4) if margin_s is None else margin_s
        if not 0 <= self.margin_s < ttl_s / 2:
            raise ValueError(f"session margin_s must be in [0, ttl_s / 2), got {self.margin_s}")
        self._clock: Clock = clock or SystemClock()
        self.lease_id = 0
        self.done = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        # Monotonic instant after which the lease must be assumed expired.
        self._expires_at = 0.0

    async def start(self) -> None:
        """Grants the lease and starts the keep-alive task.

        Raises:
            Unavailable: etcd could not grant a lease.
        """
        if self._task is not None:
            raise RuntimeError("session already started")
        sent_at = self._clock.monotonic()
        self.lease_id = await self._kv.grant(self.ttl_s)
        self._expires_at = sent_at + self.ttl_s
        self._task = asyncio.create_task(self._keep_alive(), name=f"session-{self.lease_id:x}")
        log.info("session started lease=%x ttl=%ds", self.lease_id, self.ttl_s)

    def may_act(self) -> bool:
        """Whether the lease is certainly alive for a while yet (see the class docstring)."""
        return not self.done.is_set() and self._clock.monotonic() < self._fence_at()

    def held_for_s(self) -> float:
        """How much longer (seconds) the lease certainly holds, less a safety margin of
        ``margin_s / 2`` for clock error between processes; 0 when the session may not act.

        What the node promises workers that hold its executions: they start one only at an
        instant before the promise, when no other node can have taken the partition yet
        (a new owner claims only after the lease expired). Later than :meth:`may_act`'s
        limit, which also covers dispatches still on their way."""
        if not self.may_act():
            return 0.0
        return max(0.0, self._expires_at - self.margin_s / 2 - self._clock.monotonic())

    def _fence_at(self) -> float:
        return self._expires_at - self.margin_s

    async def _keep_alive(self) -> None:
        interval = self.ttl_s / 3
        try:
            while not self.done.is_set():
                # Wakes for the next keep-alive, or at the self-fencing instant if that comes
                # first (a process resumed after a pause finds it passed).
                await self._clock.sleep(max(0.0, min(interval, self._fence_at() - self._now())))
                if self._now() >= self._fence_at():
                    log.warning(
                        "session lease=%x: no keep-alive for too long; fencing itself %.2f s "
                        "before the lease may expire",
                        self.lease_id,
                        self.margin_s,
                    )
                    return
                if not await self._refresh_within_fence():
                    return
        finally:
            self.done.set()

    def _now(self) -> float:
        return self._clock.monotonic()

    async def _refresh_within_fence(self) -> bool:
        """One keep-alive, given up at the self-fencing instant (etcd may hang, not fail)."""
        left = self._fence_at() - self._now()
        refresh = asyncio.ensure_future(self._refresh_once())
        deadline = asyncio.ensure_future(self._clock.sleep(max(0.0, left)))
        try:
            await asyncio.wait([refresh, deadline], return_when=asyncio.FIRST_COMPLETED)
        finally:
            deadline.cancel()
            hung = not refresh.done()
            if hung:
                refresh.cancel()
        if hung:
            log.warning("session lease=%x: keep-alive hung past the fencing instant", self.lease_id)
            return False
        return refresh.result()

    async def _refresh_once(self) -> bool:
        """One keep-alive; False when the lease is (or must be assumed) gone."""
        sent_at = self._clock.monotonic()
        try:
            ttl = await self._kv.keepalive_once(self.lease_id)
        except Unavailable as exc:
            if self._clock.monotonic() >= self._fence_at():
                log.warning(
                    "session lease=%x lost: no keep-alive within TTL (%s)", self.lease_id, exc
                )
                return False
            log.info("session lease=%x keep-alive failed, retrying: %s", self.lease_id, exc)
            return True
        if ttl <= 0:
            log.warning("session lease=%x expired or revoked", self.lease_id)
            return False
        # The lease lives at least until sent_at + ttl: etcd renewed it after we sent.
        self._expires_at = sent_at + ttl
        return True

    async def stop(self, graceful: bool = True, timeout: float | None = None) -> None:
        """Stops keep-alives; graceful: revokes the lease too (keys attached to it vanish).

        Safe to call more than once and after the lease was lost. Not graceful, or if etcd
        is unreachable or the revoke takes longer than ``timeout`` seconds on the clock, the
        lease simply expires after its TTL.
        """
        already_done = self.done.is_set()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        self.done.set()
        if self.lease_id and not already_done and graceful:
            try:
                if not await within(self._clock, self._kv.revoke(self.lease_id), timeout):
                    raise Unavailable(f"no answer within {timeout} s")
            except Unavailable as exc:
                log.warning(
                    "session lease=%x revoke failed, it will expire: %s", self.lease_id, exc
                )

"""A lease plus its keep-alive: a node's liveness in etcd (like etcd's concurrency.Session)."""

from __future__ import annotations

import asyncio
import contextlib
import logging

from schedd._clock import Clock, SystemClock
from schedd._errors import Unavailable
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

    Args:
        kv: the store.
        ttl_s: lease TTL in seconds (>= 2); keep-alives are sent every ``ttl_s / 3``.
        clock: source of monotonic time and sleeps.
    """

    def __init__(self, kv: KV, *, ttl_s: int = 5, clock: Clock | None = None) -> None:
        if ttl_s < 2:
            raise ValueError(f"session ttl_s must be >= 2, got {ttl_s}")
        self._kv = kv
        self.ttl_s = ttl_s
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

    async def _keep_alive(self) -> None:
        interval = self.ttl_s / 3
        try:
            while not self.done.is_set():
                await self._clock.sleep(interval)
                if not await self._refresh_once():
                    return
        finally:
            self.done.set()

    async def _refresh_once(self) -> bool:
        """One keep-alive; False when the lease is (or must be assumed) gone."""
        sent_at = self._clock.monotonic()
        try:
            ttl = await self._kv.keepalive_once(self.lease_id)
        except Unavailable as exc:
            if self._clock.monotonic() >= self._expires_at:
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

    async def close(self) -> None:
        """Stops keep-alives and revokes the lease (keys attached to it vanish).

        Safe to call more than once and after the lease was lost. If etcd is unreachable
        the lease simply expires after its TTL.
        """
        already_done = self.done.is_set()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        self.done.set()
        if self.lease_id and not already_done:
            try:
                await self._kv.revoke(self.lease_id)
            except Unavailable as exc:
                log.warning(
                    "session lease=%x revoke failed, it will expire: %s", self.lease_id, exc
                )

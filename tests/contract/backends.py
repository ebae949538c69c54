"""What a contract test gets: one store backend under test (see conftest.py)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from schedd._clock import ManualClock
from schedd.store import KV


@dataclass
class Backend:
    """A store under test, the prefix its test owns, and a way to let time pass."""

    name: str
    kv: KV
    prefix: bytes
    clock: ManualClock | None = None

    def key(self, name: str) -> bytes:
        return self.prefix + name.encode()

    async def pass_time(self, seconds: float) -> None:
        """Real seconds on etcd; a manual clock's on the in-process stores (no sleeping)."""
        if self.clock is None:
            await asyncio.sleep(seconds)
        else:
            self.clock.advance(seconds)
            await asyncio.sleep(0)

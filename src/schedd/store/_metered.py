"""A :class:`KV` that reports each request's duration and outcome (the node's etcd metrics)."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any, TypeVar

from schedd.store._types import KeyValue, StoreWrites, WatchBatch
from schedd.store.abc import KV, Compare, Op, OpBuilder, TxnResult

T = TypeVar("T")

#: ``on_request(op, seconds, ok)``; ``op`` is the KV method ("txn", "range", "keepalive", ...).
OnRequest = Callable[[str, float, bool], None]


class MeteredKV:
    """Wraps a store; every call is timed into ``on_request`` (failed: it raised). A
    keep-alive that finds its lease gone counts as failed too. Watches pass through."""

    def __init__(self, kv: KV, on_request: OnRequest) -> None:
        self.inner = kv
        self._on = on_request

    async def _timed(self, op: str, call: Any) -> Any:
        t0 = time.perf_counter()
        ok = False
        try:
            out = await call
            ok = True
            return out
        finally:
            self._on(op, time.perf_counter() - t0, ok)

    @property
    def ops(self) -> OpBuilder:
        return self.inner.ops

    def writes(self) -> StoreWrites | None:
        return self.inner.writes()

    async def close(self) -> None:
        await self.inner.close()

    async def get(self, key: bytes) -> KeyValue | None:
        out: KeyValue | None = await self._timed("get", self.inner.get(key))
        return out

    async def range(
        self,
        start: bytes,
        end: bytes,
        *,
        limit: int = 0,
        revision: int = 0,
        keys_only: bool = False,
    ) -> tuple[list[KeyValue], int, bool]:
        call = self.inner.range(start, end, limit=limit, revision=revision, keys_only=keys_only)
        out: tuple[list[KeyValue], int, bool] = await self._timed("range", call)
        return out

    async def range_all(
        self,
        start: bytes,
        end: bytes,
        *,
        page: int = 2000,
        revision: int = 0,
        keys_only: bool = False,
    ) -> tuple[list[KeyValue], int]:
        call = self.inner.range_all(start, end, page=page, revision=revision, keys_only=keys_only)
        out: tuple[list[KeyValue], int] = await self._timed("range", call)
        return out

    async def get_many(self, keys: Sequence[bytes], *, per_txn: int = 128) -> list[KeyValue | None]:
        call = self.inner.get_many(keys, per_txn=per_txn)
        out: list[KeyValue | None] = await self._timed("get", call)
        return out

    async def count(self, start: bytes, end: bytes) -> int:
        out: int = await self._timed("range", self.inner.count(start, end))
        return out

    async def txn(
        self,
        compares: Sequence[Compare],
        success: Sequence[Op],
        failure: Sequence[Op] = (),
        *,
        timeout_s: float | None = None,
    ) -> TxnResult:
        call = self.inner.txn(compares, success, failure, timeout_s=timeout_s)
        out: TxnResult = await self._timed("txn", call)
        return out

    async def put(self, key: bytes, value: bytes, *, lease: int = 0) -> int:
        out: int = await self._timed("put", self.inner.put(key, value, lease=lease))
        return out

    async def delete(self, key: bytes, end: bytes | None = None) -> int:
        out: int = await self._timed("delete", self.inner.delete(key, end))
        return out

    async def compact(self, revision: int) -> None:
        await self._timed("compact", self.inner.compact(revision))

    async def grant(self, ttl_s: int) -> int:
        out: int = await self._timed("grant", self.inner.grant(ttl_s))
        return out

    async def keepalive_once(self, lease_id: int) -> int:
        t0 = time.perf_counter()
        ttl = 0
        try:
            ttl = await self.inner.keepalive_once(lease_id)
            return ttl
        finally:
            self._on("keepalive", time.perf_counter() - t0, ttl > 0)

    async def revoke(self, lease_id: int) -> None:
        await self._timed("revoke", self.inner.revoke(lease_id))

    def watch(self, start: bytes, end: bytes, start_revision: int) -> AsyncIterator[WatchBatch]:
        return self.inner.watch(start, end, start_revision)

"""Tenant limits in etcd: ``tenants/{tenant}`` holds a TenantLimits protobuf.

Written only through the client API (:class:`TenantStore`); every node mirrors the prefix
(:class:`~schedd.coord.PrefixMirror`) and parses it with :func:`decode_limits`.
"""

from __future__ import annotations

import logging

from schedd._errors import NotFound
from schedd.store._keys import Keys
from schedd.store._types import KeyValue, prefix_end
from schedd.store.abc import KV
from schedd.v1 import scheduler_pb2

log = logging.getLogger(__name__)


def decode_limits(value: bytes) -> scheduler_pb2.TenantLimits | None:
    """The limits stored in a value, or None (logged) when it does not parse."""
    limits = scheduler_pb2.TenantLimits()
    try:
        limits.ParseFromString(value)
    except Exception as exc:
        log.warning("ignoring unreadable tenant limits: %s", exc)
        return None
    return limits if limits.tenant else None


def limits_by_tenant(kvs: list[KeyValue]) -> dict[str, scheduler_pb2.TenantLimits]:
    out = {}
    for kv in kvs:
        limits = decode_limits(kv.value)
        if limits is not None:
            out[limits.tenant] = limits
    return out


class TenantStore:
    """Set, read, list and delete tenants' limits (the values are checked by the caller)."""

    def __init__(self, kv: KV, keys: Keys) -> None:
        self._kv = kv
        self._keys = keys

    async def set(
        self, limits: scheduler_pb2.TenantLimits, now_ms: int
    ) -> scheduler_pb2.TenantLimits:
        stored = scheduler_pb2.TenantLimits()
        stored.CopyFrom(limits)
        stored.updated_ms = now_ms
        await self._kv.put(self._keys.tenant_key(limits.tenant), stored.SerializeToString())
        return stored

    async def get(self, tenant: str) -> scheduler_pb2.TenantLimits:
        kv = await self._kv.get(self._keys.tenant_key(tenant))
        limits = decode_limits(kv.value) if kv is not None else None
        if limits is None:
            raise NotFound(f"tenant {tenant!r} has no limits")
        return limits

    async def list(self) -> list[scheduler_pb2.TenantLimits]:
        prefix = self._keys.tenants_prefix()
        kvs, _ = await self._kv.range_all(prefix, prefix_end(prefix))
        return sorted(limits_by_tenant(kvs).values(), key=lambda t: t.tenant)

    async def delete(self, tenant: str) -> scheduler_pb2.TenantLimits:
        """Lifts a tenant's limits; returns what they were."""
        ops = self._kv.ops
        key = self._keys.tenant_key(tenant)
        result = await self._kv.txn([], [ops.get(key), ops.delete(key)])
        found = result.kvs(0)
        limits = decode_limits(found[0].value) if found else None
        if limits is None:
            raise NotFound(f"tenant {tenant!r} has no limits")
        return limits

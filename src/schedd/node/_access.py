"""Who may do what on a node: API tokens, the peer secret, the audit trail, tenants' limits.

:class:`Access` mirrors the API tokens into the registry calls are checked against (ending the
worker streams of tokens revoked, expired or deleted), loads the cluster's peer secret, keeps
the audit trail, and mirrors every tenant's limits (quotas for the API gate; rates and running
caps for the fire policy, of which this node enforces its share).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import grpc

from schedd._clock import Clock
from schedd._errors import SchedError
from schedd.auth import (
    PEER_METADATA,
    AuditLog,
    MetadataInterceptor,
    TokenRegistry,
    decode_token,
    load_peer_secret,
)
from schedd.coord import PrefixMirror
from schedd.node._config import NodeConfig
from schedd.node._fire_policy import FirePolicy
from schedd.node._tenants import describe_limits
from schedd.store import KV, Keys, limits_by_tenant
from schedd.v1 import auth_pb2, scheduler_pb2

log = logging.getLogger(__name__)

#: Ends the worker streams whose token the registry now refuses (the dispatcher's).
EndSessions = Callable[[Callable[[str], bool], str], object]


class Access:
    """Tokens, peer secret, audit trail and tenants' limits of one node."""

    def __init__(self, kv: KV, keys: Keys, config: NodeConfig, clock: Clock) -> None:
        self.kv, self.keys, self.config, self.clock = kv, keys, config, clock
        self.audit = AuditLog(kv, keys, config.node_id, clock, retention_ms=config.history_ttl_ms)
        #: With auth on: the API tokens, as mirrored from the store.
        self.tokens: TokenRegistry | None = (
            TokenRegistry(clock.now_ms, self._fetch_token) if config.auth else None
        )
        self.peer_secret: str | None = None
        #: Every tenant's limits, quotas included.
        self.limits: dict[str, scheduler_pb2.TenantLimits] = {}
        self._mirrors: list[PrefixMirror] = []

    async def load_peer_secret(self) -> None:
        """The cluster's peer secret (made by the first node with auth on)."""
        self.peer_secret = await load_peer_secret(self.kv, self.keys)

    async def start(self, end_sessions: EndSessions, policy: FirePolicy) -> None:
        """Starts mirroring the tokens (auth on) and the tenants' limits."""
        if self.tokens is not None:
            await self._mirror_tokens(self.tokens, end_sessions)
        await self._mirror_limits(policy)

    async def stop(self) -> None:
        for mirror in self._mirrors:
            await mirror.stop()

    def peer_interceptors(self) -> list[grpc.aio.ClientInterceptor]:
        """What a call to a peer carries: the peer secret, with auth on."""
        if self.peer_secret is None:
            return []
        return [MetadataInterceptor(PEER_METADATA, self.peer_secret)]

    async def expire_tokens(self, end_sessions: EndSessions) -> None:
        """Ends the worker streams of tokens that expired (revocations end them at once)."""
        registry = self.tokens
        while registry is not None:
            await self.clock.sleep(5.0)
            end_sessions(registry.refused, "expired")

    async def prune_audit(self) -> None:
        """Deletes audit entries older than the history's retention, every few minutes."""
        while True:
            try:
                await self.audit.prune()
            except SchedError as exc:
                log.info("audit prune failed (tried again later): %s", exc)
            await self.clock.sleep(max(60.0, self.config.history_prune_interval_s * 5))

    async def _mirror_tokens(self, registry: TokenRegistry, end_sessions: EndSessions) -> None:
        mirror = PrefixMirror(self.kv, self.keys.tokens_prefix(), clock=self.clock)

        def changed(_listed: bool) -> None:
            registry.replace(list(mirror.items.values()))
            end_sessions(registry.refused, "revoked, expired or deleted")

        mirror.add_listener(changed)
        await mirror.start()
        self._mirrors.append(mirror)

    async def _fetch_token(self, token_id: str) -> auth_pb2.ApiToken | None:
        kv = await self.kv.get(self.keys.token_key(token_id))
        return decode_token(kv.value) if kv is not None else None

    async def _mirror_limits(self, policy: FirePolicy) -> None:
        """Every tenant's limits; the fire policy gets those with a rate or a running cap."""
        mirror = PrefixMirror(self.kv, self.keys.tenants_prefix(), clock=self.clock)

        def changed(_listed: bool) -> None:
            every = limits_by_tenant(list(mirror.items.values()))
            self.limits.clear()
            self.limits.update(every)
            limits = {t: lim for t, lim in every.items() if lim.rate or lim.max_running}
            if limits != policy.tenants.limits():
                log.info(
                    "tenant limits: %s", describe_limits(limits) or "none",
                    extra={"node": self.config.node_id},
                )  # fmt: skip
            policy.set_limits(limits)

        mirror.add_listener(changed)
        await mirror.start()
        self._mirrors.append(mirror)

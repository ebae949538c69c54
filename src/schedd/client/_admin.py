"""The administration calls of :class:`~schedd.client.AsyncClient`: tenant limits, API
tokens and the audit trail. A part of AsyncClient (its base class), apart from the job and
execution calls; :class:`~schedd.client.Client` has each of them, blocking."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeVar

import grpc.aio

from schedd.v1 import auth_pb2, scheduler_pb2, scheduler_pb2_grpc

_Resp = TypeVar("_Resp")


class AdminCalls:
    """Tenant limits, tokens and the audit trail, over :meth:`_call` (AsyncClient's)."""

    _stub: scheduler_pb2_grpc.SchedulerAsyncStub

    async def _call(
        self, method: grpc.aio.UnaryUnaryMultiCallable[Any, _Resp], request: Any
    ) -> _Resp:
        """The call with the client's deadline, failures as SchedError (AsyncClient's)."""
        raise NotImplementedError

    # -- tenants --------------------------------------------------------------------------------
    async def set_tenant_limits(
        self,
        tenant: str,
        *,
        rate: float = 0,
        burst: int = 0,
        max_running: int = 0,
        max_jobs: int = 0,
        api_rate: float = 0,
        api_burst: int = 0,
    ) -> scheduler_pb2.TenantLimits:
        """Replace ``tenant``'s limits: ``rate`` fires per second (``burst`` at once; default
        one second's worth) and ``max_running`` executions at once; 0 leaves that one
        unlimited. Every node enforces its share within a moment; fires over a limit wait,
        in order. Quotas: ``max_jobs`` stored at once, and ``api_rate`` API calls per second
        per node (``api_burst`` at once); over them calls get ``ResourceExhausted``. Returns
        the limits as stored."""
        limits = scheduler_pb2.TenantLimits(
            tenant=tenant, rate=rate, burst=burst, max_running=max_running,
            max_jobs=max_jobs, api_rate=api_rate, api_burst=api_burst,
        )  # fmt: skip
        req = scheduler_pb2.SetTenantLimitsRequest(limits=limits)
        return await self._call(self._stub.SetTenantLimits, req)

    async def get_tenant_limits(self, tenant: str) -> scheduler_pb2.TenantLimits:
        """``tenant``'s limits; ``NotFound`` when it has none."""
        req = scheduler_pb2.GetTenantLimitsRequest(tenant=tenant)
        return await self._call(self._stub.GetTenantLimits, req)

    async def list_tenant_limits(self) -> list[scheduler_pb2.TenantLimits]:
        """Every tenant that has limits, by name."""
        req = scheduler_pb2.ListTenantLimitsRequest()
        resp = await self._call(self._stub.ListTenantLimits, req)
        return list(resp.tenants)

    async def delete_tenant_limits(self, tenant: str) -> scheduler_pb2.TenantLimits:
        """Lift ``tenant``'s limits (its waiting fires go at once); returns what they were.
        ``NotFound`` when it had none."""
        req = scheduler_pb2.DeleteTenantLimitsRequest(tenant=tenant)
        return await self._call(self._stub.DeleteTenantLimits, req)

    # -- tokens and the audit trail -------------------------------------------------------------
    async def create_token(
        self,
        role: str,
        *,
        tenant: str = "",
        description: str = "",
        ttl_s: float = 0,
        queues: Sequence[str] = (),
        tenants: Sequence[str] = (),
    ) -> scheduler_pb2.CreateTokenResponse:
        """Make an API token (admin only): ``role`` admin, editor, viewer or worker; editor
        and viewer tokens act for ``tenant``; worker tokens may be limited to ``queues`` and
        ``tenants``. ``ttl_s`` 0: it never expires. The answer's ``secret`` is the bearer
        string, returned this once."""
        token = auth_pb2.ApiToken(
            role=role, tenant=tenant, description=description, queues=queues, tenants=tenants
        )
        req = scheduler_pb2.CreateTokenRequest(token=token, ttl_ms=round(ttl_s * 1000))
        return await self._call(self._stub.CreateToken, req)

    async def list_tokens(
        self, tenant: str = "", *, include_revoked: bool = False
    ) -> list[auth_pb2.ApiToken]:
        """Every token (admin only), or ``tenant``'s; revoked ones only when asked."""
        req = scheduler_pb2.ListTokensRequest(tenant=tenant, include_revoked=include_revoked)
        return list((await self._call(self._stub.ListTokens, req)).tokens)

    async def revoke_token(self, token_id: str) -> auth_pb2.ApiToken:
        """Revoke a token (admin only): every node refuses it within a moment."""
        req = scheduler_pb2.RevokeTokenRequest(id=token_id)
        return await self._call(self._stub.RevokeToken, req)

    async def who_am_i(self) -> auth_pb2.ApiToken:
        """The token this client calls with (an anonymous admin on a cluster without auth)."""
        return await self._call(self._stub.WhoAmI, scheduler_pb2.WhoAmIRequest())

    async def list_audit(
        self,
        *,
        tenant: str = "",
        since_ms: int = 0,
        until_ms: int = 0,
        actor: str = "",
        limit: int = 1000,
    ) -> list[auth_pb2.AuditEntry]:
        """Audit entries in time order from ``since_ms``, at most ``limit``: admins see every
        tenant's (or ``tenant``'s), other tokens their tenant's."""
        out: list[auth_pb2.AuditEntry] = []
        token = ""
        while len(out) < limit:
            req = scheduler_pb2.ListAuditRequest(
                tenant=tenant, since_ms=since_ms, until_ms=until_ms, actor=actor,
                page_size=min(1000, limit - len(out)), page_token=token,
            )  # fmt: skip
            resp = await self._call(self._stub.ListAudit, req)
            out.extend(resp.entries)
            token = resp.next_page_token
            if not token:
                break
        return out

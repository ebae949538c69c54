"""The client API's administration calls: tenants' limits, API tokens, the audit trail.

:class:`AdminCalls` is the base of :class:`~._api.NodeApi`: the same validation, scoping and
audit notes as the job and execution calls, for what administrators (and, read-only, a tenant's
own callers) manage.
"""

from __future__ import annotations

from collections.abc import Callable

from schedd._clock import Clock
from schedd._errors import InvalidArgument
from schedd.auth import (
    ANONYMOUS,
    AuditLog,
    Caller,
    TokenStore,
    current,
    note,
    public,
    validate_new_token,
)
from schedd.model import check_text, validate_tenant_limits
from schedd.store import TenantStore
from schedd.v1 import auth_pb2, scheduler_pb2

MAX_PAGE = 1000


def page_size(value: int, field: str = "page_size") -> int:
    """The page size a request asks for (0: 100).

    Raises:
        InvalidArgument: on ``field`` when negative or above the maximum.
    """
    if value < 0 or value > MAX_PAGE:
        raise InvalidArgument(field, f"must be between 0 and {MAX_PAGE}, got {value}")
    return value or 100


class AdminCalls:
    """Tenants' limits, API tokens and the audit trail, for the client API."""

    auth: bool
    clock: Clock
    tenants: TenantStore
    tokens: TokenStore
    audit: AuditLog | None
    _on_token: Callable[[auth_pb2.ApiToken], None] | None

    def _caller(self) -> Caller:
        return current(self.auth)

    # -- tenants -------------------------------------------------------------------------------

    async def set_tenant_limits(
        self, req: scheduler_pb2.SetTenantLimitsRequest
    ) -> scheduler_pb2.TenantLimits:
        self._caller().require_admin("setting tenant limits")
        limits = validate_tenant_limits(req.limits)
        note(tenant=limits.tenant, target=limits.tenant)
        return await self.tenants.set(limits, self.clock.now_ms())

    async def get_tenant_limits(
        self, req: scheduler_pb2.GetTenantLimitsRequest
    ) -> scheduler_pb2.TenantLimits:
        tenant = check_text("tenant", req.tenant, required=True)
        self._caller().scope("tenant", tenant)
        return await self.tenants.get(tenant)

    async def list_tenant_limits(
        self, req: scheduler_pb2.ListTenantLimitsRequest
    ) -> scheduler_pb2.ListTenantLimitsResponse:
        caller = self._caller()
        caller.require_api()
        found = [t for t in await self.tenants.list() if caller.sees(t.tenant)]
        return scheduler_pb2.ListTenantLimitsResponse(tenants=found)

    async def delete_tenant_limits(
        self, req: scheduler_pb2.DeleteTenantLimitsRequest
    ) -> scheduler_pb2.TenantLimits:
        self._caller().require_admin("lifting tenant limits")
        tenant = check_text("tenant", req.tenant, required=True)
        note(tenant=tenant, target=tenant)
        return await self.tenants.delete(tenant)

    # -- tokens and the audit trail --------------------------------------------------------------

    async def create_token(
        self, req: scheduler_pb2.CreateTokenRequest
    ) -> scheduler_pb2.CreateTokenResponse:
        caller = self._caller()
        caller.require_admin("making tokens")
        token = validate_new_token(req.token, req.ttl_ms)
        stored, secret = await self.tokens.create(
            token, req.ttl_ms, self.clock.now_ms(), created_by=caller.actor
        )
        if self._on_token is not None:
            self._on_token(stored)  # usable on this node at once, before the mirror hears
        note(tenant=stored.tenant, target=f"{stored.id} ({stored.role})")
        return scheduler_pb2.CreateTokenResponse(token=public(stored), secret=secret)

    async def list_tokens(
        self, req: scheduler_pb2.ListTokensRequest
    ) -> scheduler_pb2.ListTokensResponse:
        self._caller().require_admin("listing tokens")
        found = [
            public(t)
            for t in await self.tokens.list()
            if (not req.tenant or t.tenant == req.tenant)
            and (req.include_revoked or not t.revoked_ms)
        ]
        return scheduler_pb2.ListTokensResponse(tokens=found)

    async def revoke_token(self, req: scheduler_pb2.RevokeTokenRequest) -> auth_pb2.ApiToken:
        self._caller().require_admin("revoking tokens")
        token_id = check_text("id", req.id, required=True)
        token = await self.tokens.revoke(token_id, self.clock.now_ms())
        if self._on_token is not None:
            self._on_token(token)
        note(tenant=token.tenant, target=token.id)
        return public(token)

    async def who_am_i(self, req: scheduler_pb2.WhoAmIRequest) -> auth_pb2.ApiToken:
        caller = self._caller()
        if caller.actor == ANONYMOUS.actor:
            return auth_pb2.ApiToken(id=caller.actor, role=caller.role)
        return public(await self.tokens.get(caller.actor))

    async def list_audit(
        self, req: scheduler_pb2.ListAuditRequest
    ) -> scheduler_pb2.ListAuditResponse:
        caller = self._caller()
        tenant = caller.scope("tenant", req.tenant)
        if self.audit is None:
            return scheduler_pb2.ListAuditResponse()
        if req.since_ms < 0 or req.until_ms < 0:
            raise InvalidArgument("since_ms" if req.since_ms < 0 else "until_ms", "negative")
        entries, token = await self.audit.list(
            tenant=tenant if tenant or not caller.admin else None,
            since_ms=req.since_ms,
            until_ms=req.until_ms,
            actor=req.actor,
            page_size=page_size(req.page_size),
            page_token=req.page_token,
        )
        return scheduler_pb2.ListAuditResponse(entries=entries, next_page_token=token)

"""The way into the client API: who calls (tokens), how often (per-tenant API quotas), under
which identity the call runs (:func:`~._caller.acting_as`), and what the audit trail records.

The gRPC servicer and the dashboard both call through one :class:`ApiGate`, so a call made
from a browser is checked, limited and recorded exactly like one made with schedctl.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Awaitable, Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass, replace
from typing import Any, TypeVar

from schedd._errors import ResourceExhausted, SchedError
from schedd.auth._audit import AuditLog
from schedd.auth._caller import ANONYMOUS, Caller, acting_as
from schedd.auth._tokens import TokenRegistry
from schedd.v1 import auth_pb2, scheduler_pb2

log = logging.getLogger(__name__)

Req = TypeVar("Req")
Resp = TypeVar("Resp")

#: The calls that change something: each is recorded in the audit trail, with its outcome.
MUTATIONS = frozenset(
    {
        "CreateJob", "BatchCreateJobs", "UpdateJob", "DeleteJob", "PauseJob", "ResumeJob",
        "TriggerJob", "BackfillJob", "CancelExecution", "RedriveDeadLetters",
        "SetTenantLimits", "DeleteTenantLimits", "CreateToken", "RevokeToken",
    }
)  # fmt: skip


@dataclass
class AuditNote:
    """What the API tells the audit trail about the call it serves: the tenant acted on and
    the target (ids); ``skip`` for a call that changed nothing by design (a dry run)."""

    tenant: str = ""
    target: str = ""
    skip: bool = False


_note: ContextVar[AuditNote | None] = ContextVar("schedd_audit_note", default=None)


def note(*, tenant: str | None = None, target: str | None = None, skip: bool = False) -> None:
    """Tells the audit entry of the call being served its tenant and target."""
    current = _note.get()
    if current is None:
        return
    if tenant is not None:
        current.tenant = tenant
    if target is not None:
        current.target = target[:512]
    current.skip = current.skip or skip


@contextlib.contextmanager
def _noting(entry: AuditNote) -> Iterator[None]:
    reset = _note.set(entry)
    try:
        yield
    finally:
        _note.reset(reset)


class _Bucket:
    __slots__ = ("at_ms", "tokens")

    def __init__(self, tokens: float, at_ms: int) -> None:
        self.tokens = tokens
        self.at_ms = at_ms


class ApiQuotas:
    """Each tenant's API calls per second on this node (TenantLimits.api_rate, api_burst): a
    token bucket per tenant; a call over it is refused with RESOURCE_EXHAUSTED and the delay
    after which one would pass."""

    def __init__(
        self,
        limits_of: Callable[[str], scheduler_pb2.TenantLimits | None],
        now_ms: Callable[[], int],
    ) -> None:
        self._limits_of = limits_of
        self._now_ms = now_ms
        self._buckets: dict[str, _Bucket] = {}

    def charge(self, tenant: str) -> None:
        limits = self._limits_of(tenant) if tenant else None
        if limits is None or limits.api_rate <= 0:
            return
        rate = limits.api_rate
        burst = float(limits.api_burst or max(1, round(rate)))
        now = self._now_ms()
        bucket = self._buckets.get(tenant)
        if bucket is None:
            bucket = self._buckets[tenant] = _Bucket(burst, now)
        bucket.tokens = min(burst, bucket.tokens + (now - bucket.at_ms) * rate / 1000.0)
        bucket.at_ms = now
        if bucket.tokens >= 1.0:
            bucket.tokens -= 1.0
            return
        wait_s = (1.0 - bucket.tokens) / rate
        raise ResourceExhausted(
            f"tenant {tenant!r} is over its API quota of {rate:g} calls/s "
            f"(burst {burst:g}) on this node: retry in {wait_s * 1000:.0f} ms",
            retry_after_s=wait_s,
        )


def request_tenant(request: Any) -> str:
    """The tenant a request names, if any (``tenant``, ``job.tenant``, ``limits.tenant``)."""
    for name in ("tenant", "job", "limits", "token"):
        try:
            value = getattr(request, name)
        except AttributeError:
            continue
        if isinstance(value, str):
            if value:
                return value
        elif hasattr(value, "tenant") and value.tenant:
            return str(value.tenant)
    return ""


class ApiGate:
    """Authenticates, limits, runs and records one client API call.

    Args:
        auth: whether calls need a token (off: every call is :data:`ANONYMOUS`, an admin).
        tokens: the node's token registry (needed with ``auth``).
        audit: where mutations are recorded (None: nowhere, in tests).
        quotas: per-tenant API call quotas (None: none).
    """

    def __init__(
        self,
        *,
        auth: bool,
        tokens: TokenRegistry | None = None,
        audit: AuditLog | None = None,
        quotas: ApiQuotas | None = None,
    ) -> None:
        if auth and tokens is None:
            raise ValueError("auth needs a token registry")
        self.auth = auth
        self.tokens = tokens
        self.audit = audit
        self.quotas = quotas

    async def caller(self, bearer: str | None, peer: str = "") -> Caller:
        """Who sends ``bearer`` (Unauthenticated with auth on and no valid token)."""
        if not self.auth or self.tokens is None:
            return replace(ANONYMOUS, peer=peer) if peer else ANONYMOUS
        return await self.tokens.authenticate(bearer, peer)

    async def call(
        self,
        method: str,
        fn: Callable[[Req], Awaitable[Resp]],
        request: Req,
        *,
        bearer: str | None = None,
        peer: str = "",
        caller: Caller | None = None,
    ) -> Resp:
        """Runs ``fn(request)`` as the caller (``caller``, or the one ``bearer`` names)."""
        who = caller if caller is not None else await self.caller(bearer, peer)
        if self.quotas is not None:
            self.quotas.charge(who.tenant or request_tenant(request))
        entry = AuditNote()
        code, detail = "OK", ""
        try:
            with acting_as(who), _noting(entry):
                return await fn(request)
        except SchedError as err:
            code, detail = err.grpc_code, str(err)
            raise
        except Exception as exc:
            code, detail = "INTERNAL", f"{type(exc).__name__}: {exc}"
            raise
        finally:
            # Bad input is refused before anything is touched: not worth an entry. Refusals
            # of valid requests (not found, not allowed, conflicts) are recorded.
            recorded = method in MUTATIONS and not entry.skip and code != "INVALID_ARGUMENT"
            if self.audit is not None and recorded:
                await self.audit.record(
                    auth_pb2.AuditEntry(
                        actor=who.actor,
                        role=who.role,
                        tenant=entry.tenant or request_tenant(request),
                        method=method,
                        target=entry.target,
                        peer=who.peer,
                        code=code,
                        detail=detail[:512],
                    )
                )

"""Who is calling, and what that caller may see and change.

A :class:`Caller` is set for the duration of one call (:func:`acting_as`) by the gRPC
interceptor or the dashboard, and read by the API (:func:`current`). With auth off nobody sets
one and every call acts as :data:`ANONYMOUS`, an admin.

The roles, from most to least:

* ``admin``: every tenant, every call (tokens, tenant limits, the whole cluster status).
* ``editor``: its tenant's jobs, runs and dead letters: read, create, change, trigger, redrive.
* ``viewer``: reads its tenant's jobs, runs, dead letters, limits and audit trail.
* ``worker``: the Worker stream only (and the cluster status it discovers nodes with),
  optionally limited to queues and tenants.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass

from schedd._errors import JobNotFound, PermissionDenied, Unauthenticated

ADMIN = "admin"
EDITOR = "editor"
VIEWER = "viewer"
WORKER = "worker"
ROLES = (ADMIN, EDITOR, VIEWER, WORKER)


@dataclass(frozen=True, slots=True)
class Caller:
    """One authenticated caller: its token id (``actor``), role and tenant."""

    actor: str
    role: str
    tenant: str = ""
    #: Worker tokens: the queues and tenants it is limited to (empty: any).
    queues: frozenset[str] = frozenset()
    tenants: frozenset[str] = frozenset()
    #: Where the call came from (the transport's peer address), for the audit trail.
    peer: str = ""

    @property
    def admin(self) -> bool:
        return self.role == ADMIN

    def sees(self, tenant: str) -> bool:
        """Whether this caller may see ``tenant``'s jobs, runs and dead letters."""
        return self.role == ADMIN or (self.role in (EDITOR, VIEWER) and tenant == self.tenant)

    def require_api(self) -> None:
        """Refuses worker tokens: they serve the Worker stream, not the client API."""
        if self.role == WORKER:
            raise PermissionDenied(
                f"token {self.actor} is a worker token: it may only connect workers"
            )

    def require_admin(self, what: str) -> None:
        if self.role != ADMIN:
            raise PermissionDenied(
                f"{what} needs an admin token (token {self.actor} is {self.role})"
            )

    def require_writer(self, tenant: str, field: str = "") -> None:
        """May change ``tenant``'s jobs, runs and dead letters (``field`` names where the
        tenant came from, in the error)."""
        self.require_api()
        if self.role == VIEWER:
            raise PermissionDenied(f"token {self.actor} is a viewer token: it may only read")
        if not self.sees(tenant):
            where = f"{field}: " if field else ""
            raise PermissionDenied(where + self._other_tenant(tenant))

    def scope(self, field: str, tenant: str) -> str:
        """The tenant a listing covers: an admin gets what it asked for ("": every tenant); a
        tenant token gets its own, and PermissionDenied (naming ``field``) for another."""
        self.require_api()
        if self.role == ADMIN:
            return tenant
        if tenant and tenant != self.tenant:
            raise PermissionDenied(f"{field}: {self._other_tenant(tenant)}")
        return self.tenant

    def check_job(self, job_id: str, tenant: str) -> None:
        """A job of a tenant this caller may not see does not exist, as far as it can tell."""
        self.require_api()
        if not self.sees(tenant):
            raise JobNotFound(job_id)

    def _other_tenant(self, tenant: str) -> str:
        return f"token {self.actor} acts for tenant {self.tenant!r}, not {tenant!r}"


def worker_scope(caller: Caller, queues: list[str]) -> frozenset[str] | None:
    """The tenants a worker stream with this caller's token may be sent (None: any).

    Raises:
        PermissionDenied: not a worker or admin token, or a queue the token may not serve.
    """
    if caller.role not in (WORKER, ADMIN):
        raise PermissionDenied(
            f"token {caller.actor} is a {caller.role} token: workers need a worker token"
        )
    if caller.queues:
        extra = sorted(set(queues) - caller.queues)
        if extra:
            raise PermissionDenied(
                f"hello.queues: token {caller.actor} may serve {sorted(caller.queues)}, not {extra}"
            )
    return caller.tenants or None


#: Every call with auth off.
ANONYMOUS = Caller(actor="anonymous", role=ADMIN)

_current: ContextVar[Caller | None] = ContextVar("schedd_caller", default=None)


def current(auth: bool) -> Caller:
    """The caller of the call being served; with ``auth`` off, :data:`ANONYMOUS` when none
    was set. With auth on a call without a caller is refused (never silently admin)."""
    caller = _current.get()
    if caller is not None:
        return caller
    if auth:
        raise Unauthenticated("no credentials: send a token (authorization: Bearer sdt_...)")
    return ANONYMOUS


@contextlib.contextmanager
def acting_as(caller: Caller | None) -> Iterator[None]:
    """Runs the block as ``caller`` (None: as nobody)."""
    reset = _current.set(caller)
    try:
        yield
    finally:
        _current.reset(reset)

"""Checks for a tenant's limits (``schedctl tenant set``, ``SetTenantLimits``)."""

from __future__ import annotations

import math

from schedd._errors import InvalidArgument
from schedd.model._fields import check_text
from schedd.v1 import scheduler_pb2

#: The largest rate, burst or running-at-once a tenant may be given.
MAX_TENANT_LIMIT = 1_000_000


def default_burst(rate: float) -> int:
    """One second's worth of fires (at least one): what a rate allows at once when no burst
    is given."""
    return max(1, math.ceil(rate))


def validate_tenant_limits(limits: scheduler_pb2.TenantLimits) -> scheduler_pb2.TenantLimits:
    """A checked, normalised copy of ``limits`` (tenant NFC, burst defaulted to a second's
    worth of the rate, ``updated_ms`` cleared: the store sets it).

    Raises:
        InvalidArgument: naming the field: no tenant, a rate that is negative, not finite or
            over the maximum, a burst without a rate, a negative or too large burst or
            max_running, or no limit at all (delete the tenant's limits instead).
    """
    tenant = check_text("limits.tenant", limits.tenant, required=True)
    rate = limits.rate
    if not math.isfinite(rate) or rate < 0:
        raise InvalidArgument("limits.rate", "must be a finite number >= 0 (fires per second)")
    if rate > MAX_TENANT_LIMIT:
        raise InvalidArgument("limits.rate", f"must be at most {MAX_TENANT_LIMIT} per second")
    for field, value in (("burst", limits.burst), ("max_running", limits.max_running)):
        if value < 0:
            raise InvalidArgument(f"limits.{field}", "must be >= 0")
        if value > MAX_TENANT_LIMIT:
            raise InvalidArgument(f"limits.{field}", f"must be at most {MAX_TENANT_LIMIT}")
    if limits.burst and not rate:
        raise InvalidArgument(
            "limits.burst", "needs a rate (a burst is what a rate allows at once)"
        )
    if not rate and not limits.max_running:
        raise InvalidArgument(
            "limits", "set a rate or max_running (to lift a tenant's limits, delete them)"
        )
    return scheduler_pb2.TenantLimits(
        tenant=tenant,
        rate=rate,
        burst=(limits.burst or default_burst(rate)) if rate else 0,
        max_running=limits.max_running,
    )

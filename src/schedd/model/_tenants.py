"""Checks for a tenant's limits (``schedctl tenant set``, ``SetTenantLimits``)."""

from __future__ import annotations

import math

from schedd._errors import InvalidArgument
from schedd.model._ids import check_tenant
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
    tenant = check_tenant("limits.tenant", limits.tenant, required=True)
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
    api_rate = _check_quotas(limits)
    if not rate and not limits.max_running and not api_rate and not limits.max_jobs:
        raise InvalidArgument(
            "limits",
            "set a rate, max_running, max_jobs or api_rate (to lift a tenant's limits, "
            "delete them)",
        )
    return scheduler_pb2.TenantLimits(
        tenant=tenant,
        rate=rate,
        burst=(limits.burst or default_burst(rate)) if rate else 0,
        max_running=limits.max_running,
        max_jobs=limits.max_jobs,
        api_rate=api_rate,
        api_burst=(limits.api_burst or default_burst(api_rate)) if api_rate else 0,
    )


def _check_quotas(limits: scheduler_pb2.TenantLimits) -> float:
    """Checks max_jobs, api_rate and api_burst; returns api_rate."""
    api_rate = limits.api_rate
    if not math.isfinite(api_rate) or api_rate < 0 or api_rate > MAX_TENANT_LIMIT:
        raise InvalidArgument(
            "limits.api_rate", f"must be a number from 0 to {MAX_TENANT_LIMIT} (calls per second)"
        )
    for field, value in (("max_jobs", limits.max_jobs), ("api_burst", limits.api_burst)):
        if value < 0:
            raise InvalidArgument(f"limits.{field}", "must be >= 0")
        if value > (100_000_000 if field == "max_jobs" else MAX_TENANT_LIMIT):
            raise InvalidArgument(f"limits.{field}", "is too large")
    if limits.api_burst and not api_rate:
        raise InvalidArgument("limits.api_burst", "needs an api_rate")
    return api_rate

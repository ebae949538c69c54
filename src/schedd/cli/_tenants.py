"""``schedctl tenant set|get|list|delete``: per-tenant rate and concurrency limits."""

from __future__ import annotations

import click
from rich.table import Table

from schedd.cli._context import output_option, settings
from schedd.cli._output import emit, emit_list, local_time, rows_table
from schedd.client import tenant_limits_to_dict
from schedd.v1 import scheduler_pb2

_COLUMNS = ("TENANT", "RATE/S", "BURST", "MAX RUNNING", "MAX JOBS", "API/S", "UPDATED")


def _table(limits: list[scheduler_pb2.TenantLimits]) -> Table:
    rows = [
        (
            t.tenant,
            f"{t.rate:g}" if t.rate else "unlimited",
            t.burst if t.rate else "-",
            t.max_running or "unlimited",
            t.max_jobs or "unlimited",
            f"{t.api_rate:g} (burst {t.api_burst})" if t.api_rate else "unlimited",
            local_time(t.updated_ms),
        )
        for t in limits
    ]
    return rows_table(_COLUMNS, rows)


def _emit(limits: list[scheduler_pb2.TenantLimits], one: bool) -> None:
    dicts = [tenant_limits_to_dict(t) for t in limits]
    if one:
        emit(settings().output, dicts[0], table=lambda: _table(limits))
    else:
        emit_list(settings().output, "tenants", dicts, lambda: _table(limits))


@click.group("tenant")
def tenant_group() -> None:
    """Per-tenant limits: fires per second and executions at once, cluster-wide."""


@tenant_group.command("set")
@click.argument("tenant")
@click.option(
    "--rate",
    type=click.FloatRange(min=0),
    default=0,
    help="Fires handed out per second (0: no rate limit).",
)
@click.option(
    "--burst",
    type=click.IntRange(min=0),
    default=0,
    help="How many may go at once before the rate paces them [default: a second's worth].",
)
@click.option(
    "--max-running",
    type=click.IntRange(min=0),
    default=0,
    help="Executions handed out and unfinished at once (0: no limit).",
)
@click.option(
    "--max-jobs",
    type=click.IntRange(min=0),
    default=0,
    help="Quota: jobs stored at once; creates beyond it are refused (0: no quota).",
)
@click.option(
    "--api-rate",
    type=click.FloatRange(min=0),
    default=0,
    help="Quota: API calls per second on each node; calls beyond it are refused (0: none).",
)
@click.option(
    "--api-burst",
    type=click.IntRange(min=0),
    default=0,
    help="API calls at once before --api-rate paces them [default: a second's worth].",
)
@output_option
def tenant_set(
    tenant: str,
    rate: float,
    burst: int,
    max_running: int,
    max_jobs: int,
    api_rate: float,
    api_burst: int,
) -> None:
    """Set TENANT's limits, replacing what it had. Fires over a limit are not dropped: they
    wait, in order, and each execution records how long (``throttled_ms``). Over a quota
    (--max-jobs, --api-rate), calls are refused with RESOURCE_EXHAUSTED."""
    limits = settings().client().set_tenant_limits(
        tenant, rate=rate, burst=burst, max_running=max_running,
        max_jobs=max_jobs, api_rate=api_rate, api_burst=api_burst,
    )  # fmt: skip
    _emit([limits], one=True)


@tenant_group.command("get")
@click.argument("tenant")
@output_option
def tenant_get(tenant: str) -> None:
    """Show TENANT's limits (exit 3 when it has none)."""
    _emit([settings().client().get_tenant_limits(tenant)], one=True)


@tenant_group.command("list")
@output_option
def tenant_list() -> None:
    """Every tenant that has limits."""
    _emit(settings().client().list_tenant_limits(), one=False)


@tenant_group.command("delete")
@click.argument("tenant")
@output_option
def tenant_delete(tenant: str) -> None:
    """Lift TENANT's limits; its waiting fires go at once (exit 3 when it had none)."""
    _emit([settings().client().delete_tenant_limits(tenant)], one=True)

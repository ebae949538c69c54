"""``schedctl run ...``, ``dlq ...``, ``worker list`` and ``cluster status``."""

from __future__ import annotations

import time

import click
from rich.console import Group
from rich.table import Table

from schedd.cli._context import output_option, settings
from schedd.cli._output import console, emit, local_time, rows_table
from schedd.client import cluster_status_to_dict, execution_to_dict
from schedd.model import parse_state, state_name
from schedd.v1 import execution_pb2, scheduler_pb2

_STATES = [state_name(v).lower() for v in range(1, 11)]


def emit_executions(executions: list[execution_pb2.Execution]) -> None:
    """Print executions as a table or as a list of dicts."""
    now = int(time.time() * 1000)

    def table() -> Table:
        rows = [
            (
                e.id,
                state_name(e.state),
                e.attempt,
                local_time(e.scheduled_ms, now),
                e.worker_id,
                e.fencing_token,
                e.error or e.reason,
            )
            for e in executions
        ]
        cols = ("ID", "STATE", "ATTEMPT", "SCHEDULED", "WORKER", "TOKEN", "ERROR/REASON")
        return rows_table(cols, rows)

    emit(settings().output, [execution_to_dict(e) for e in executions], table)


@click.group("run")
def run_group() -> None:
    """Inspect executions."""


@run_group.command("list")
@click.option("--job", "job_id", default="", help="Only this job's executions.")
@click.option("--state", "states", multiple=True, type=click.Choice(_STATES, case_sensitive=False))
@click.option("--tenant", default="")
@click.option("--limit", type=click.IntRange(min=1), default=100, show_default=True)
@output_option
def run_list(job_id: str, states: tuple[str, ...], tenant: str, limit: int) -> None:
    """List executions, newest first."""
    values = [parse_state(s, "--state") for s in states]
    emit_executions(settings().client().list_executions(job_id, values, tenant, limit))


@run_group.command("get")
@click.argument("execution_id")
@output_option
def run_get(execution_id: str) -> None:
    """Show one execution (JOB@MILLIS)."""
    emit(settings().output, execution_to_dict(settings().client().get_execution(execution_id)))


@click.group("dlq")
def dlq_group() -> None:
    """The dead-letter queue."""


@dlq_group.command("list")
@click.option("--tenant", default="")
@click.option("--job", "job_id", default="")
@click.option("--limit", type=click.IntRange(min=1), default=100, show_default=True)
@output_option
def dlq_list(tenant: str, job_id: str, limit: int) -> None:
    """List dead executions."""
    emit_executions(settings().client().list_dead_letters(tenant, job_id, limit))


@dlq_group.command("redrive")
@click.argument("execution_ids", nargs=-1)
@click.option("--tenant", default="")
@click.option("--job", "job_id", default="")
@click.option("--all", "everything", is_flag=True, help="Redrive every dead letter.")
@output_option
def dlq_redrive(execution_ids: tuple[str, ...], tenant: str, job_id: str, everything: bool) -> None:
    """Put dead executions back (the ids given, or all matching --tenant/--job)."""
    if not (execution_ids or tenant or job_id or everything):
        raise click.UsageError("give execution ids, --tenant, --job or --all")
    redriven = settings().client().redrive(list(execution_ids), tenant, job_id)
    emit_executions(redriven)


def _cluster_tables(status: scheduler_pb2.ClusterStatus) -> Group:
    nodes = rows_table(
        ("NODE", "ADDRESS", "VERSION", "PARTITIONS", "STARTED"),
        [
            (n.node_id, n.address, n.version, n.partitions_owned, local_time(n.started_ms))
            for n in status.nodes
        ],
        title=f"cluster {status.cluster_id or '-'}: {status.partition_count} partitions",
    )
    parts = rows_table(
        ("PARTITION", "OWNER", "EPOCH"),
        [(p.partition, p.owner or "(none)", p.epoch) for p in status.partitions],
    )
    return Group(nodes, parts, _workers_table(status))


def _workers_table(status: scheduler_pb2.ClusterStatus) -> Table:
    return rows_table(
        ("WORKER", "NODE", "QUEUES", "HANDLERS", "IN FLIGHT", "HELD", "CONNECTED"),
        [
            (
                w.worker_id,
                w.node_id,
                ",".join(w.queues),
                ",".join(w.handlers),
                f"{w.in_flight}/{w.capacity}",
                f"{w.held}/{w.prefetch}",
                local_time(w.connected_ms),
            )
            for w in status.workers
        ],
    )


@click.group("cluster")
def cluster_group() -> None:
    """The cluster."""


@cluster_group.command("status")
@output_option
def cluster_status() -> None:
    """Nodes, partition owners with their epochs, and workers."""
    status = settings().client().cluster_status()
    if settings().output == "table":
        console().print(_cluster_tables(status))
        return
    emit(settings().output, cluster_status_to_dict(status))


@click.group("worker")
def worker_group() -> None:
    """Connected workers."""


@worker_group.command("list")
@output_option
def worker_list() -> None:
    """List the workers connected to any node."""
    status = settings().client().cluster_status()
    data = cluster_status_to_dict(status)["workers"]
    emit(settings().output, data, lambda: _workers_table(status))

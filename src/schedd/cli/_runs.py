"""``schedctl run ...``, ``dlq ...``, ``worker list`` and ``cluster status``."""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import click
from rich.console import Group
from rich.table import Table

from schedd.cli._context import job_id_of, output_option, settings, until_ctrl_c
from schedd.cli._exit import warn_missing
from schedd.cli._output import console, emit, emit_list, local_time, rows_table
from schedd.client import (
    Client,
    cluster_status_to_dict,
    execution_note,
    execution_to_dict,
    lateness_ms,
    missing_nodes_to_dicts,
    worker_to_dict,
)
from schedd.model import parse_state, state_name
from schedd.v1 import execution_pb2, scheduler_pb2

_STATES = [state_name(v).lower() for v in range(1, 11)]


def emit_executions(
    executions: list[execution_pb2.Execution],
    missing: Sequence[scheduler_pb2.MissingNode] | None = None,
) -> None:
    """Print executions as a table, or ``{"executions": [...]}`` as json or yaml (one per line
    as jsonl).

    ``missing`` (a cluster-wide listing): the nodes that did not answer. They get one warning
    line on stderr, and ``"missing_nodes": [...]`` beside the executions.
    """
    now = int(time.time() * 1000)

    def table() -> Table:
        rows = [
            (
                e.id,
                e.job_name or "(deleted)",
                state_name(e.state),
                e.attempt,
                local_time(e.scheduled_ms, now),
                e.worker_id,
                e.fencing_token,
                execution_note(e),
            )
            for e in executions
        ]
        cols = ("ID", "JOB", "STATE", "ATTEMPT", "SCHEDULED", "WORKER", "TOKEN", "ERROR/REASON")
        return rows_table(cols, rows)

    rows = [execution_to_dict(e) for e in executions]
    if missing is None:
        emit_list(settings().output, "executions", rows, table)
        return
    warn_missing(missing)
    emit_listing("executions", rows, missing, table)


def emit_listing(
    key: str,
    rows: list[dict[str, Any]],
    missing: Sequence[scheduler_pb2.MissingNode],
    table: Callable[[], Table],
) -> None:
    """A cluster-wide listing: ``{key: rows, "missing_nodes": [...]}`` as json or yaml, the
    rows alone as jsonl or a table."""
    extra = {"missing_nodes": missing_nodes_to_dicts(missing)}
    emit_list(settings().output, key, rows, table, extra)


@click.group("run")
def run_group() -> None:
    """Inspect executions."""


@run_group.command("list")
@click.option("--job", "job_id", default="", help="Only this job's executions (its id or name).")
@click.option("--state", "states", multiple=True, type=click.Choice(_STATES, case_sensitive=False))
@click.option("--tenant", default="")
@click.option("--limit", type=click.IntRange(min=1), default=100, show_default=True)
@click.option(
    "--root",
    default="",
    metavar="JOB@MILLIS",
    help="Only one root fire's runs: the root's execution id (its job's id or name), and the"
    " runs of every job after it for that fire.",
)
@click.option(
    "--watch", "-w", is_flag=True, help="Keep following: print runs as they appear or change."
)
@click.option("--interval", type=click.FloatRange(min=0.2), default=1.0, show_default=True)
@output_option
def run_list(
    job_id: str,
    states: tuple[str, ...],
    tenant: str,
    limit: int,
    root: str,
    watch: bool,
    interval: float,
) -> None:
    """List executions of every node, newest first.

    A node that does not answer is named in one warning line on stderr (the list may lack
    its executions); ``-o json`` prints ``{"executions": [...], "missing_nodes": [...]}``.
    With ``--watch``, the runs listed now, then one line per run that appears or changes
    state (``-o jsonl``: one JSON object per line), until Ctrl-C.
    """
    values = [parse_state(s, "--state") for s in states]
    client = settings().client()
    job_id = job_id_of(job_id, gone_ok=True)
    root = _root_id(root)
    if not watch:
        listing = client.list_executions(job_id, values, tenant, limit, root=root)
        emit_executions(listing, listing.missing_nodes)
        return
    with until_ctrl_c() as stop:
        _follow(client, (job_id, values, tenant, limit, root), interval, stop)


def _root_id(root: str) -> str:
    """``--root``: JOB@MILLIS with JOB's name replaced by its id (anything else is sent as it
    is: the node names what is wrong with it)."""
    job, sep, ms = root.rpartition("@")
    if not sep or not job or not ms.isdigit():
        return root
    return f"{job_id_of(job, gone_ok=True)}@{ms}"


def _follow(
    client: Client,
    query: tuple[str, list[int], str, int, str],
    interval: float,
    stop: threading.Event,
) -> None:
    job_id, values, tenant, limit, root = query
    seen: dict[str, tuple[int, int]] = {}
    warned: set[str] = set()
    while not stop.is_set():
        listing = client.list_executions(job_id, values, tenant, limit, root=root)
        for m in listing.missing_nodes:
            if m.node_id not in warned:
                warned.add(m.node_id)
                warn_missing([m])
        fresh = [
            e for e in reversed(list(listing)) if seen.get(e.id) != (e.state, e.attempt)
        ]  # oldest first, like a log
        for e in fresh:
            seen[e.id] = (e.state, e.attempt)
        _follow_lines(fresh)
        stop.wait(interval)


def _follow_lines(executions: list[execution_pb2.Execution]) -> None:
    fmt = settings().output
    now = int(time.time() * 1000)
    for e in executions:
        if fmt in ("json", "jsonl"):
            sys.stdout.write(json.dumps(execution_to_dict(e), default=str) + "\n")
        else:
            late_ms = lateness_ms(e)
            late = "" if late_ms is None else f"{late_ms} ms late"
            reason = execution_note(e)[:120]
            parts = [local_time(e.scheduled_ms, now), e.id, state_name(e.state),
                     f"attempt {e.attempt}", e.worker_id, late, reason]  # fmt: skip
            sys.stdout.write("  ".join(p for p in parts if p) + "\n")
    sys.stdout.flush()


@run_group.command("get")
@click.argument("execution_id")
@output_option
def run_get(execution_id: str) -> None:
    """Show one execution (JOB@MILLIS), asking every node.

    Not found (exit 3) only when every node answered; when some did not, unavailable
    (exit 5), naming them.
    """
    emit(settings().output, execution_to_dict(settings().client().get_execution(execution_id)))


@run_group.command("cancel")
@click.argument("execution_id")
@click.option("--reason", default="", help="Recorded with the execution.")
@output_option
def run_cancel(execution_id: str, reason: str) -> None:
    """Cancel a pending, waiting, held or running execution (JOB@MILLIS): it ends CANCELLED; a
    running attempt is told to stop. Exit 3 when unknown, 4 when it has ended already."""
    ex = settings().client().cancel_execution(execution_id, reason)
    emit(settings().output, execution_to_dict(ex))


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
    emit_executions(
        settings().client().list_dead_letters(tenant, job_id_of(job_id, gone_ok=True), limit)
    )


@dlq_group.command("redrive")
@click.argument("execution_ids", nargs=-1)
@click.option("--tenant", default="")
@click.option("--job", "job_id", default="")
@click.option("--all", "everything", is_flag=True, help="Redrive every dead letter.")
@click.option("--yes", "-y", is_flag=True, help="Do not ask before redriving many.")
@output_option
def dlq_redrive(
    execution_ids: tuple[str, ...], tenant: str, job_id: str, everything: bool, yes: bool
) -> None:
    """Put dead executions back (the ids given, or all matching --tenant/--job, or --all).

    Without ids, the matching dead letters are counted first; at a terminal schedctl asks
    before redriving them (``--yes`` skips the question). The count redriven goes to stderr.
    """
    if not (execution_ids or tenant or job_id or everything):
        raise click.UsageError("give execution ids, --tenant, --job or --all")
    if execution_ids and (tenant or job_id or everything):
        raise click.UsageError("give execution ids, or --tenant/--job/--all, not both")
    client = settings().client()
    job_id = job_id_of(job_id, gone_ok=True)
    if not execution_ids:
        count = len(client.list_dead_letters(tenant, job_id, limit=1_000_000))
        scope = _scope(tenant, job_id)
        if count == 0:
            click.echo(f"no dead letters {scope}", err=True)
            emit_executions([])
            return
        if (
            not yes
            and sys.stdin.isatty()
            and not click.confirm(f"redrive {count} dead letters {scope}?", err=True)
        ):
            raise click.ClickException("nothing redriven")
    redriven = client.redrive(list(execution_ids), tenant, job_id, everything=everything)
    click.echo(f"redrove {len(redriven)} dead letters", err=True)
    emit_executions(redriven)


def _scope(tenant: str, job_id: str) -> str:
    parts = [f"of tenant {tenant}"] if tenant else []
    parts += [f"of job {job_id}"] if job_id else []
    return " and ".join(parts) or "in the whole cluster"


def _skew(n: scheduler_pb2.NodeStatus) -> str:
    if not n.reported:
        return "(no answer)"
    return f"{n.clock_skew_ms:+d} ms" if n.clock_skew_known else "?"


def _eligible(n: scheduler_pb2.NodeStatus) -> str:
    if not n.reported:
        return "?"
    return "yes" if n.eligible else f"no: {n.ineligible_reason}"


def _cluster_tables(status: scheduler_pb2.ClusterStatus) -> Group:
    nodes = rows_table(
        ("NODE", "ADDRESS", "VERSION", "PARTITIONS", "SKEW", "ELIGIBLE", "STARTED"),
        [
            (
                n.node_id,
                n.address,
                n.version,
                n.partitions_owned,
                _skew(n),
                _eligible(n),
                local_time(n.started_ms),
            )
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
        ("WORKER", "NODES", "QUEUES", "HANDLERS", "IN FLIGHT", "HELD", "CONNECTED"),
        [
            (
                w.worker_id,
                ",".join(w.node_ids) or w.node_id,
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
    """Nodes (each one's own clock skew, eligibility and partitions), partition owners with
    their epochs, and workers. A node that does not answer is named on stderr."""
    status = settings().client().cluster_status()
    warn_missing(status.missing_nodes, "status")
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
    """List the workers connected to any node, once each, with the nodes they are connected
    to. A node that does not answer is named on stderr; ``-o json`` prints
    ``{"workers": [...], "missing_nodes": [...]}``."""
    status = settings().client().cluster_status()
    warn_missing(status.missing_nodes)
    rows = [worker_to_dict(w) for w in status.workers]
    emit_listing("workers", rows, status.missing_nodes, lambda: _workers_table(status))

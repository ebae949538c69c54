"""``schedctl queue list``: per queue, cluster-wide, the work waiting and the workers for it."""

from __future__ import annotations

import click
from rich.table import Table

from schedd.cli._context import output_option, settings
from schedd.cli._exit import warn_missing
from schedd.cli._output import emit, rows_table
from schedd.cli._runs import emit_listing
from schedd.client import missing_nodes_to_dicts, queue_to_dict
from schedd.v1 import scheduler_pb2


def _free(q: scheduler_pb2.QueueStatus) -> str:
    """``free/capacity``; ``-`` when the free slots are not reported (a tenant's token)."""
    if not q.HasField("free_slots"):
        return f"-/{q.capacity}"
    return f"{q.free_slots}/{q.capacity}"


def _queues_table(resp: scheduler_pb2.ListQueuesResponse) -> Table:
    title = f"tenant {resp.tenant!r} only" if resp.tenant else None
    return rows_table(
        ("QUEUE", "DUE", "HELD", "RUNNING", "WORKERS", "FREE SLOTS"),
        [(q.queue, q.due, q.held, q.running, q.workers, _free(q)) for q in resp.queues],
        title=title,
    )


@click.group("queue")
def queue_group() -> None:
    """Queues: the work waiting on them and the workers consuming them."""


@queue_group.command("list")
@click.option("--queue", default="", help="Only this queue (listed even when it is empty).")
@click.option(
    "--tenant",
    default="",
    help="Only this tenant's executions (admins; a tenant's token always sees its own only).",
)
@output_option
def queue_list(queue: str, tenant: str) -> None:
    """Per queue, over every node: executions DUE (waiting for a worker with a free slot),
    HELD (sent ahead of their instant to a worker, not started), RUNNING, the WORKERS
    consuming it and their FREE SLOTS out of their capacity (a worker serving several queues
    counts in each). A node that does not answer is named on stderr and its part is missing;
    ``-o json`` prints ``{"queues": [...], "tenant": ..., "missing_nodes": [...]}``."""
    resp = settings().client().list_queues(queue, tenant)
    warn_missing(resp.missing_nodes, "counts")
    rows = [queue_to_dict(q) for q in resp.queues]
    if settings().output in ("json", "yaml"):
        emit(
            settings().output,
            {
                "queues": rows,
                "tenant": resp.tenant,
                "missing_nodes": missing_nodes_to_dicts(resp.missing_nodes),
            },
        )
        return
    emit_listing("queues", rows, resp.missing_nodes, lambda: _queues_table(resp))

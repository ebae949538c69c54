"""``schedctl job describe ID``: a job's spec, its next fires, its last runs and dead letters."""

from __future__ import annotations

import time
from typing import Any

import click
from rich.console import Group
from rich.table import Table

from schedd._errors import NotFound
from schedd.cli._context import find_job, output_option, settings
from schedd.cli._output import console, emit, key_value_table, local_time, relative, rows_table
from schedd.client import execution_note, execution_to_dict, job_to_dict, lateness_ms, next_fires
from schedd.model import state_name
from schedd.v1 import execution_pb2, job_pb2


def _runs_table(runs: list[execution_pb2.Execution], now: int) -> Table:
    rows = []
    for r in runs:
        late = lateness_ms(r)
        error = execution_note(r)[:120]
        rows.append(
            (r.id.rpartition("@")[2], local_time(r.scheduled_ms, now), state_name(r.state),
             r.attempt, "-" if late is None else f"{late} ms", error)
        )  # fmt: skip
    return rows_table(("SCHEDULED MS", "SCHEDULED", "STATE", "ATTEMPT", "LATENESS", "ERROR"), rows,
                      title="last runs")  # fmt: skip


def _named(ids: list[str]) -> list[dict[str, str]]:
    """``[{"id": ..., "name": ...}]`` of jobs (a job gone meanwhile: name "")."""
    client = settings().client()
    out = []
    for job_id in ids:
        try:
            name = client.get_job(job_id).name
        except NotFound:
            name = ""
        out.append({"id": job_id, "name": name})
    return out


def _root_of(job: job_pb2.Job) -> str:
    """The scheduled job ``job`` descends from (through its first parents)."""
    client, seen = settings().client(), {job.id}
    while job.after and job.after[0] not in seen:
        seen.add(job.after[0])
        try:
            job = client.get_job(job.after[0])
        except NotFound:
            break
    return job.id


def _show(jobs: list[dict[str, str]]) -> str:
    return ", ".join(f"{j['name'] or '(deleted)'} ({j['id']})" for j in jobs)


def _graph(job: job_pb2.Job) -> dict[str, Any]:
    """Its parents, its children (by name and id) and, for a job with parents, its root."""
    out: dict[str, Any] = {
        "parents": _named(list(job.after)),
        "children": _named(list(job.children)),
    }
    if job.after:
        out["root"] = _root_of(job)
    return out


@click.command("describe")
@click.argument("job_id", metavar="JOB")
@click.option("--fires", "n_fires", type=click.IntRange(0, 1000), default=5, show_default=True)
@click.option("--runs", "n_runs", type=click.IntRange(0, 1000), default=10, show_default=True)
@output_option
def job_describe(job_id: str, n_fires: int, n_runs: int) -> None:
    """Show a job: its spec, its next fires (UTC and the job's zone) or the jobs it runs
    after, the jobs after it, its last runs with lateness and errors, and its dead letters.
    JOB is its id or its name."""
    client = settings().client()
    job = find_job(job_id)
    job_id = job.id
    now = int(time.time() * 1000)
    fires = next_fires(job, now, n_fires) if not job.after else []
    runs = list(client.list_executions(job_id=job_id, limit=n_runs)) if n_runs else []
    dead = client.list_dead_letters(job_id=job_id, limit=100)
    graph = _graph(job)
    if settings().output != "table":
        doc = {
            "job": job_to_dict(job),
            **graph,
            "next_fires": [{"utc": f["utc"], "local": f["local"]} for f in fires],
            "runs": [{**execution_to_dict(r), "lateness_ms": lateness_ms(r)} for r in runs],
            "dead_letters": [execution_to_dict(d) for d in dead],
        }
        emit(settings().output, doc)
        return
    spec = {k: v for k, v in job_to_dict(job).items() if not k.endswith("_ms")}
    spec["after"] = _show(graph["parents"]) or "-"
    spec["children"] = _show(graph["children"]) or "-"
    if job.after:
        del spec["schedule"]
    zone = job.schedule.timezone or "UTC"
    fire_rows = [(f["utc"], f["local"], relative(f["ms"], now)) for f in fires]
    parts: list[Any] = [key_value_table(spec)]
    if job.after:
        parts.append(
            f"runs after {_show(graph['parents'])}: once per fire of its root {graph['root']},"
            " when every one of them has succeeded (no schedule of its own)"
        )
    elif job.paused:
        parts.append("[bold]paused[/bold]: no fires until it is resumed")
    else:
        parts.append(rows_table(("UTC", f"LOCAL ({zone})", "WHEN"), fire_rows, title="next fires"))
    parts.append(_runs_table(runs, now) if runs else "no runs yet")
    if dead:
        dead_rows = [(d.id, d.attempt, (d.error or d.reason)[:80]) for d in dead]
        parts.append(
            rows_table(("EXECUTION", "ATTEMPTS", "ERROR"), dead_rows, title="dead letters")
        )
    else:
        parts.append("no dead letters")
    console().print(Group(*parts))

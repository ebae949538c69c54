"""``schedctl job ...``: create, get, list, update, delete, pause, resume, trigger, backfill."""

from __future__ import annotations

import shlex
import sys
import time
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

import click
from rich.table import Table

from schedd.cli._context import (
    find_job,
    job_id_of,
    output_option,
    parse_json,
    parse_labels,
    parse_pairs,
    settings,
    until_ctrl_c,
)
from schedd.cli._output import emit, emit_list, local_time, relative, rows_table
from schedd.cli._runs import emit_executions
from schedd.client import (
    UNSET,
    build_update,
    execution_to_dict,
    iso_utc,
    job_state_word,
    job_to_dict,
)
from schedd.v1 import job_pb2

_BOTH = "give --schedule or --after, not both: a job that runs after others has no schedule"
MISFIRE = click.Choice(["catch_up", "once", "skip"], case_sensitive=False)
OVERLAP = click.Choice(["allow", "forbid", "buffer_one", "replace"], case_sensitive=False)


def _target_text(job: job_pb2.Job) -> str:
    kind = job.WhichOneof("target")
    if kind == "handler":
        return f"{job.handler.name} ({job.handler.queue})"
    if kind == "http":
        return f"{job.http.method or 'POST'} {job.http.url}"
    if kind == "shell":
        return shlex.join(job.shell.argv)
    return "-"


def schedule_text(job: job_pb2.Job, names: dict[str, str]) -> str:
    """A job's schedule column: its expression and zone, or ``after export, import`` for a
    job that runs after others (``names``: job id -> name; the id when not there)."""
    if job.after:
        return "after " + ", ".join(names.get(p, p) for p in job.after)
    return f"{job.schedule.expr} [{job.schedule.timezone}]"


def emit_jobs(jobs: list[job_pb2.Job]) -> None:
    """Print jobs as a table or as a list of dicts."""
    now = int(time.time() * 1000)
    names = {j.id: j.name for j in jobs}

    def table() -> Table:
        rows = [
            (
                j.id,
                j.name,
                j.tenant,
                schedule_text(j, names),
                _target_text(j),
                job_state_word(j),
                local_time(j.next_fire_ms, now),
            )
            for j in jobs
        ]
        cols = ("ID", "NAME", "TENANT", "SCHEDULE", "TARGET", "STATE", "NEXT FIRE")
        return rows_table(cols, rows)

    emit_list(settings().output, "jobs", [job_to_dict(j) for j in jobs], table)


def emit_job(job: job_pb2.Job) -> None:
    """Print one job: a field table, or its dict."""
    emit(settings().output, job_to_dict(job))


def emit_changed(job: job_pb2.Job, verb: str) -> None:
    """A job just created or changed: one line (name, id, next fire in UTC and in the job's
    zone) by default, the whole record with ``-o``."""
    if settings().output != "table":
        emit_job(job)
        return
    if job.paused:
        when = "paused"
    elif job.after:
        when = f"runs after {', '.join(job.after)}"
    elif job.next_fire_ms:
        zone = job.schedule.timezone or "UTC"
        local = datetime.fromtimestamp(job.next_fire_ms / 1000, tz=ZoneInfo(zone))
        when = (f"next fire {iso_utc(job.next_fire_ms)} ({local:%Y-%m-%d %H:%M:%S} {zone},"
                f" {relative(job.next_fire_ms)})")  # fmt: skip
    else:
        when = "no further fires"
    click.echo(f"{verb} job {job.name} ({job.id}): {when}")


@click.group("job")
def job_group() -> None:
    """Create and manage jobs."""


def _target_kwargs(
    handler: str | None, http: str | None, shell: str | None, opts: dict[str, Any]
) -> dict[str, Any]:
    if sum(t is not None for t in (handler, http, shell)) > 1:
        raise click.UsageError("give only one of --handler, --http or --shell")
    method, headers = opts.pop("method"), opts.pop("headers")
    codes, cwd, env = opts.pop("success_codes"), opts.pop("cwd"), opts.pop("env")
    if http is None and (method or headers or codes):
        raise click.UsageError("--method, --header and --success-code need --http")
    if shell is None and (cwd or env):
        raise click.UsageError("--cwd and --env need --shell")
    if shell is not None:
        try:
            argv = shlex.split(shell)
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--shell") from exc
        target = job_pb2.ShellTarget(argv=argv, cwd=cwd or "", env=parse_pairs("--env", env))
        return {"shell": target}
    if http is not None:
        return {
            "http": job_pb2.HttpTarget(
                url=http,
                method=method or "",
                headers=parse_pairs("--header", headers, ":"),
                success_codes=codes,
            )
        }
    return {"handler": handler}


@job_group.command("create")
@click.argument("name")
@click.option("--schedule", "-s", help="Cron, @every 10s, @at ISO, @after 90s.")
@click.option(
    "--after",
    multiple=True,
    metavar="JOB",
    help="Run after this job (name or id) succeeds, once per fire of its root; repeatable."
    " Instead of --schedule.",
)
@click.option("--tz", default="UTC", show_default=True, help="IANA time zone.")
@click.option("--handler", help="Handler name (a worker registers it).")
@click.option("--queue", default="default", show_default=True)
@click.option("--http", "http_url", help="Webhook URL instead of a handler.")
@click.option("--method", help="HTTP method for --http (default POST).")
@click.option(
    "--header", "headers", multiple=True, metavar="'K: V'", help="HTTP header, repeatable."
)
@click.option(
    "--success-code",
    "success_codes",
    multiple=True,
    type=click.IntRange(100, 599),
    help="An HTTP status that counts as success besides 2xx, repeatable.",
)
@click.option("--shell", help="Command line instead of a handler (split like a shell).")
@click.option("--cwd", help="Working directory for --shell.")
@click.option("--env", multiple=True, metavar="K=V", help="Environment for --shell, repeatable.")
@click.option(
    "--payload", help="JSON payload, @FILE or - for stdin (the HTTP body; a shell job's stdin)."
)
@click.option("--max-attempts", type=int, default=0)
@click.option("--retry-initial", help="Backoff before the first retry, e.g. 1s (default 1s).")
@click.option("--retry-max", help="Longest backoff between attempts, e.g. 5m (default 5m).")
@click.option(
    "--retry-multiplier",
    type=click.FloatRange(min=1.0),
    default=None,
    help="Backoff growth per attempt (default 2).",
)
@click.option("--timeout", help="Per-attempt timeout, e.g. 30s.")
@click.option("--misfire", type=MISFIRE, default="once", show_default=True)
@click.option("--catch-up-limit", type=int, default=0)
@click.option("--starting-deadline", help="Drop a fire this late, e.g. 1m.")
@click.option("--overlap", type=OVERLAP, default="allow", show_default=True)
@click.option("--jitter", help="Spread fires over this long, e.g. 5s.")
@click.option("--idempotency-key", default="")
@click.option("--tenant", default="")
@click.option("--label", "labels", multiple=True, help="KEY=VALUE, repeatable.")
@click.option("--id", "job_id", default="", help="Choose the job id.")
@output_option
def job_create(name: str, **opts: Any) -> None:
    """Create a job NAME: on a --schedule, or --after other jobs (it runs once per fire of
    their root, after every one of them succeeded)."""
    handler, http, shell = opts.pop("handler"), opts.pop("http_url"), opts.pop("shell")
    if handler is None and http is None and shell is None:
        raise click.UsageError("one of --handler, --http or --shell is required")
    opts["after"] = list(opts["after"])
    if opts["after"] and opts["schedule"]:
        raise click.UsageError(_BOTH)
    if not opts["after"] and not opts["schedule"]:
        raise click.UsageError("one of --schedule or --after is required")
    opts["schedule"] = opts["schedule"] or ""
    payload = parse_json("--payload", opts.pop("payload"))
    labels = parse_labels(opts.pop("labels"))
    opts["retry_multiplier"] = opts["retry_multiplier"] or 0.0
    result = (
        settings()
        .client()
        .create_job(
            name,
            payload=payload,
            labels=labels,
            **_target_kwargs(handler, http, shell, opts),
            **opts,
        )
    )
    emit_changed(result.job, "created" if result.created else "exists:")
    for warning in result.warnings:
        click.echo(f"schedctl: warning: {warning}", err=True)


@job_group.command("get")
@click.argument("job_id", metavar="JOB")
@output_option
def job_get(job_id: str) -> None:
    """Show one job. JOB is its id or its name."""
    emit_job(find_job(job_id))


def _list_once(tenant: str, prefix: str, limit: int) -> list[job_pb2.Job]:
    jobs: list[job_pb2.Job] = []
    for job in settings().client().list_jobs(tenant, prefix, page_size=min(limit, 1000)):
        jobs.append(job)
        if len(jobs) >= limit:
            break
    return jobs


@job_group.command("list")
@click.option("--tenant", default="")
@click.option("--prefix", "name_prefix", default="", help="Only names starting with this.")
@click.option("--limit", type=click.IntRange(min=1), default=1000, show_default=True)
@click.option("--watch", is_flag=True, help="Refresh every --interval seconds.")
@click.option("--interval", type=click.FloatRange(min=0.5), default=2.0)
@output_option
def job_list(tenant: str, name_prefix: str, limit: int, watch: bool, interval: float) -> None:
    """List jobs."""
    if not watch:
        emit_jobs(_list_once(tenant, name_prefix, limit))
        return
    from rich.live import Live

    from schedd.cli._output import console

    with until_ctrl_c() as stop, Live(console=console(), refresh_per_second=2) as live:
        while not stop.is_set():
            jobs = _list_once(tenant, name_prefix, limit)
            names = {j.id: j.name for j in jobs}
            rows = [
                (j.id, j.name, schedule_text(j, names), job_state_word(j),
                 local_time(j.next_fire_ms))
                for j in jobs
            ]  # fmt: skip
            live.update(rows_table(("ID", "NAME", "SCHEDULE", "STATE", "NEXT FIRE"), rows))
            stop.wait(interval)


@job_group.command("update")
@click.argument("job_id", metavar="JOB")
@click.option("--name")
@click.option("--schedule", "-s")
@click.option("--tz")
@click.option("--handler")
@click.option("--queue")
@click.option("--payload", help="New JSON payload, @FILE or - for stdin.")
@click.option("--clear-payload", is_flag=True)
@click.option("--max-attempts", type=int)
@click.option("--retry-initial", help="Backoff before the first retry, e.g. 1s.")
@click.option("--retry-max", help="Longest backoff between attempts, e.g. 5m.")
@click.option("--retry-multiplier", type=click.FloatRange(min=1.0), help="Backoff growth.")
@click.option("--timeout")
@click.option("--misfire", type=MISFIRE)
@click.option("--catch-up-limit", type=int)
@click.option("--starting-deadline")
@click.option("--overlap", type=OVERLAP)
@click.option("--jitter")
@click.option("--label", "labels", multiple=True, help="KEY=VALUE; replaces all labels.")
@click.option(
    "--after", multiple=True, metavar="JOB", help="Its parents now (names or ids); repeatable."
)
@click.option(
    "--no-after", is_flag=True, help="Run after no job any more: on its own --schedule (needed)."
)
@click.option("--expected-version", type=int, default=0)
@output_option
def job_update(job_id: str, **opts: Any) -> None:
    """Change some fields of a job (only the options given). JOB is its id or its name."""
    opts["after"] = _after_change(opts.pop("after"), opts.pop("no_after"), opts["schedule"])
    payload: Any = UNSET
    if opts.pop("clear_payload"):
        payload = None
    raw = opts.pop("payload")
    if raw is not None:
        payload = parse_json("--payload", raw)
    opts["labels"] = parse_labels(opts.pop("labels"))
    build_update(job_id, payload=payload, **opts)  # bad local input fails before any call
    job_id = job_id_of(job_id)
    emit_changed(settings().client().update_job(job_id, payload=payload, **opts), "updated")


def _after_change(after: tuple[str, ...], no_after: bool, schedule: str | None) -> list[str] | None:
    """``--after``/``--no-after`` as update_job's ``after`` (None: unchanged, []: none)."""
    if after and no_after:
        raise click.UsageError("give --after or --no-after, not both")
    if after and schedule:
        raise click.UsageError(_BOTH)
    if no_after and not schedule:
        raise click.UsageError("--no-after needs --schedule: a job that runs after none has one")
    return [] if no_after else (list(after) or None)


@job_group.command("delete")
@click.argument("job_id", metavar="JOB")
@output_option
def job_delete(job_id: str) -> None:
    """Delete a job: its executions not yet out are removed, those out on a worker or waiting
    for one are cancelled. JOB is its id or its name."""
    job_id = job_id_of(job_id)
    cancelled = settings().client().delete_job(job_id)
    emit(settings().output, {"id": job_id, "deleted": True, "cancelled_executions": cancelled})


@job_group.command("pause")
@click.argument("job_id", metavar="JOB")
@output_option
def job_pause(job_id: str) -> None:
    """Stop a job firing until resumed. JOB is its id or its name."""
    emit_job(settings().client().pause_job(job_id_of(job_id)))


@job_group.command("resume")
@click.argument("job_id", metavar="JOB")
@output_option
def job_resume(job_id: str) -> None:
    """Resume a paused job. JOB is its id or its name."""
    emit_job(settings().client().resume_job(job_id_of(job_id)))


@job_group.command("trigger")
@click.argument("job_id", metavar="JOB")
@click.option("--payload", help="JSON payload for this run only, @FILE or - for stdin.")
@click.option(
    "--idempotency-key",
    default="",
    help="Triggering again with this key (within 24 h) makes no new run: it prints the first.",
)
@output_option
def job_trigger(job_id: str, payload: str | None, idempotency_key: str) -> None:
    """Run a job once, now."""
    value = parse_json("--payload", payload)
    execution = (
        settings().client().trigger_job(job_id_of(job_id), value, idempotency_key=idempotency_key)
    )
    emit(settings().output, execution_to_dict(execution))


@job_group.command("backfill")
@click.argument("job_id", metavar="JOB")
@click.option("--start", required=True, help="ISO-8601 time (inclusive).")
@click.option("--end", required=True, help="ISO-8601 time (exclusive).")
@click.option(
    "--limit",
    type=click.IntRange(min=0),
    default=0,
    help="At most this many fires in all (0: every fire in the range).",
)
@click.option(
    "--dry-run", is_flag=True, help="Create nothing: list what would be created and what exists."
)
@click.option(
    "--rate",
    type=click.FloatRange(min=1.0),
    default=1000.0,
    show_default=True,
    help="Executions created per second at most (a large range is created in steps).",
)
@click.option("--chunk", type=click.IntRange(1, 10_000), default=1000, show_default=True)
@output_option
def job_backfill(
    job_id: str, start: str, end: str, limit: int, dry_run: bool, rate: float, chunk: int
) -> None:
    """Create one execution per scheduled fire in [START, END), skipping fires that have a
    live execution; progress and a summary go to stderr."""
    from schedd.client import parse_time_ms

    start_ms, end_ms = parse_time_ms(start, "--start"), parse_time_ms(end, "--end")
    client = settings().client()
    job_id = job_id_of(job_id)
    made: list[Any] = []
    existing: list[int] = []
    left, cursor, calls, began = 0, start_ms, 0, time.monotonic()
    while True:
        want = chunk if not limit else min(chunk, limit - len(made) - len(existing))
        if want <= 0:
            break
        res = client.backfill_job(job_id, cursor, end_ms, want, dry_run=dry_run)
        calls += 1
        made += res.executions
        existing += res.existing_ms
        left = res.truncated
        if not res.next_start_ms or res.next_start_ms >= end_ms:
            break
        cursor = res.next_start_ms
        _backfill_progress(made, existing, left, cursor, dry_run)
        if not dry_run:  # keep to --rate
            time.sleep(max(0.0, len(made) / rate - (time.monotonic() - began)))
    if calls > 1:
        click.echo("", err=True)
    verb = "would create" if dry_run else "created"
    more = f"; {left} more fires in the range left out by --limit" if left else ""
    click.echo(
        f"backfill of {job_id}: {verb} {len(made)}, {len(existing)} exist already{more}",
        err=True,
    )
    if not dry_run:
        emit_executions(made)
        return
    rows = sorted(
        [(ex.scheduled_ms, "create") for ex in made] + [(ms, "exists") for ms in existing]
    )
    fmt = settings().output
    data = [{"scheduled_ms": ms, "scheduled_time": iso_utc(ms), "action": a} for ms, a in rows]
    emit_list(
        fmt,
        "fires",
        data,
        lambda: rows_table(["scheduled (UTC)", "local", "action"], [
            (iso_utc(ms), local_time(ms), a) for ms, a in rows
        ]),
    )  # fmt: skip


def _backfill_progress(
    made: list[Any], existing: list[int], left: int, cursor: int, dry_run: bool
) -> None:
    verb = "would create" if dry_run else "created"
    line = (
        f"backfill: {verb} {len(made)}, {len(existing)} exist, {left} to go, at {iso_utc(cursor)}"
    )
    end = "\r" if sys.stderr.isatty() else "\n"
    click.echo(line.ljust(79), err=True, nl=False)
    click.echo(end, err=True, nl=False)


def _register_describe() -> None:
    from schedd.cli._describe import job_describe

    job_group.add_command(job_describe)


_register_describe()

"""``schedctl apply -f FILE|DIR``: job specs in YAML or JSON, created or updated by name.

A job is known by (tenant, name). Each document is parsed and checked locally first; any
error names the file, the document and the field, and nothing is changed. Then every
document is compared with the job of the same tenant and name: none, it is created; one
that differs, it is updated (only the fields that differ, guarded by the job's version);
the same, it is left alone. ``--dry-run`` stops after the comparison and prints what would
happen. Applying the same files twice changes nothing the second time.

A job's ``after`` names its parents in its tenant (or gives their ids); a file may hold a
root and the jobs after it: each job is created after the jobs it names.

A document with ``kind: TenantLimits`` (what ``schedctl export`` writes for a tenant with
limits) sets that tenant's limits the way ``schedctl tenant set`` does: whole, a missing limit
is off. Limits are compared and set the same way (create, update, unchanged), before any job,
so a tenant's jobs never run without its limits.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click
import yaml
from rich.table import Table

from schedd._errors import InvalidArgument, SchedError
from schedd.cli._context import output_option, settings
from schedd.cli._output import console, emit, rows_table
from schedd.client import (
    KIND_LIMITS,
    Client,
    changed_paths,
    job_from_dict,
    limits_from_dict,
)
from schedd.model import normalise_spec, validate_tenant_limits
from schedd.v1 import job_pb2, scheduler_pb2

_SUFFIXES = (".yaml", ".yml", ".json")
#: Jobs created per call.
_CREATE_CHUNK = 500


@dataclass
class Doc:
    """One document: where it came from, what it asks for, what applying it does."""

    where: str  # "jobs.yaml#2"
    job: job_pb2.Job
    paused: bool | None
    action: str = ""
    changes: list[str] = field(default_factory=list)
    job_id: str = ""
    stored: job_pb2.Job | None = None

    @property
    def key(self) -> tuple[str, str]:
        return (self.job.tenant, self.job.name)


@dataclass
class LimitsDoc:
    """A ``kind: TenantLimits`` document: a tenant's limits, normalised, and what applying
    them does."""

    where: str
    limits: scheduler_pb2.TenantLimits
    action: str = ""
    changes: list[str] = field(default_factory=list)


#: The limits a TenantLimits document sets, in the order changes are named.
LIMIT_FIELDS = ("rate", "burst", "max_running", "max_jobs", "api_rate", "api_burst")


@dataclass
class Docs:
    """Everything the files ask for: job specs and tenant limits, in file order."""

    jobs: list[Doc] = field(default_factory=list)
    limits: list[LimitsDoc] = field(default_factory=list)


class ApplyError(click.ClickException):
    """Bad input: exit 2 with one line per problem."""

    exit_code = 2


def _files(paths: tuple[str, ...]) -> list[Path]:
    out: list[Path] = []
    for p in map(Path, paths):
        if str(p) == "-":
            out.append(p)
        elif p.is_dir():
            out.extend(sorted(f for f in p.rglob("*") if f.suffix in _SUFFIXES and f.is_file()))
        elif p.is_file():
            out.append(p)
        else:
            raise ApplyError(f"{p}: no such file or directory")
    if not out:
        raise ApplyError(f"no {'/'.join(_SUFFIXES)} files in {', '.join(paths)}")
    return out


def _documents(path: Path) -> list[Any]:
    text = sys.stdin.read() if str(path) == "-" else path.read_text()
    name = "stdin" if str(path) == "-" else str(path)
    try:
        if path.suffix == ".json":
            data = json.loads(text)
            docs = data if isinstance(data, list) else [data]
        else:
            docs = []
            for d in yaml.safe_load_all(text):
                if isinstance(d, list):
                    docs.extend(d)
                elif d is not None:
                    docs.append(d)
    except (json.JSONDecodeError, yaml.YAMLError) as exc:
        raise ApplyError(f"{name}: not valid {path.suffix.lstrip('.') or 'YAML'}: {exc}") from exc
    return docs


def _is_limits(raw: Any) -> bool:
    return isinstance(raw, dict) and raw.get("kind") == KIND_LIMITS


def _load_limits(raw: dict[str, Any], where: str, docs: Docs, errors: list[str]) -> None:
    try:
        limits = validate_tenant_limits(limits_from_dict(raw))
    except InvalidArgument as exc:  # field paths are the document's
        field = exc.field.removeprefix("limits.").removeprefix("limits")
        errors.append(f"{where}: {field}: {exc.reason}" if field else f"{where}: {exc.reason}")
        return
    for other in docs.limits:
        if other.limits.tenant == limits.tenant:
            errors.append(f"{where}: limits of tenant {limits.tenant!r} are also in {other.where}")
            return
    docs.limits.append(LimitsDoc(where, limits))


def load(paths: tuple[str, ...], now_ms: int) -> Docs:
    """Every document of every file, parsed and normalised; all errors at once."""
    docs = Docs()
    errors: list[str] = []
    seen: dict[tuple[str, str], str] = {}
    for path in _files(paths):
        name = "stdin" if str(path) == "-" else str(path)
        for n, raw in enumerate(_documents(path), start=1):
            where = f"{name}#{n}"
            if _is_limits(raw):
                _load_limits(raw, where, docs, errors)
                continue
            try:
                job, paused = job_from_dict(raw)
                job.tenant = job.tenant or "default"
                normalise_spec(job, anchor_ms=now_ms)
            except InvalidArgument as exc:  # field paths are the document's
                field = exc.field.removeprefix("job.")
                errors.append(f"{where}: {field}: {exc.reason}" if field else f"{where}: {exc}")
                continue
            doc = Doc(where, job, paused)
            if doc.key in seen:
                errors.append(f"{where}: job {job.name!r} of tenant {job.tenant!r} is also in "
                              f"{seen[doc.key]}")  # fmt: skip
                continue
            seen[doc.key] = where
            docs.jobs.append(doc)
    if errors:
        for line in errors:
            click.echo(line, err=True)
        raise ApplyError(f"{len(errors)} problem(s) in the job specs; nothing was applied")
    if not docs.jobs and not docs.limits:
        raise ApplyError(f"no job specs in {', '.join(paths)}")
    return docs


def plan_limits(client: Client, docs: list[LimitsDoc]) -> None:
    """Fill in each limits document's action against the limits stored now."""
    if not docs:
        return
    stored = {t.tenant: t for t in client.list_tenant_limits()}
    for doc in docs:
        now = stored.get(doc.limits.tenant)
        if now is None:
            doc.action = "create"
            continue
        doc.changes = [f for f in LIMIT_FIELDS if getattr(doc.limits, f) != getattr(now, f)]
        doc.action = "update" if doc.changes else "unchanged"


def execute_limits(client: Client, docs: list[LimitsDoc]) -> None:
    """Set the limits planned to change, as ``schedctl tenant set`` does."""
    for doc in docs:
        if doc.action not in ("create", "update"):
            continue
        lim = doc.limits
        try:
            client.set_tenant_limits(lim.tenant, **{f: getattr(lim, f) for f in LIMIT_FIELDS})
        except SchedError as exc:
            doc.action = f"failed: {exc}"


def plan(client: Client, docs: list[Doc]) -> None:
    """Fill in each document's action against the jobs stored now."""
    by_tenant: dict[str, dict[str, list[job_pb2.Job]]] = {}
    for tenant in sorted({d.job.tenant for d in docs}):
        named: dict[str, list[job_pb2.Job]] = {}
        for job in client.list_jobs(tenant=tenant):
            named.setdefault(job.name, []).append(job)
        by_tenant[tenant] = named
    for doc in docs:
        found = by_tenant[doc.job.tenant].get(doc.job.name, [])
        if len(found) > 1:
            ids = ", ".join(j.id for j in found)
            raise ApplyError(
                f"{doc.where}: {len(found)} jobs are named {doc.job.name!r} in tenant"
                f" {doc.job.tenant!r} ({ids}): rename or delete all but one"
            )
        if not found:
            doc.action = "create"
            continue
        stored = doc.stored = found[0]
        doc.job_id = stored.id
        doc.changes = changed_paths(_with_parent_ids(doc.job, by_tenant[doc.job.tenant]), stored)
        if doc.paused is not None and doc.paused != stored.paused:
            doc.changes.append("paused")
        doc.action = "update" if doc.changes else "unchanged"


def _with_parent_ids(job: job_pb2.Job, named: dict[str, list[job_pb2.Job]]) -> job_pb2.Job:
    """``job`` with each of its ``after`` that names a stored job of its tenant (by id, else
    by a name one job has) replaced by that job's id, as the node resolves it, so it compares
    with the stored job; a name no stored job has stays (it differs)."""
    if not job.after:
        return job
    ids = {j.id for jobs in named.values() for j in jobs}
    out = job_pb2.Job()
    out.CopyFrom(job)
    for n, ref in enumerate(job.after):
        if ref not in ids and len(named.get(ref, [])) == 1:
            out.after[n] = named[ref][0].id
    return out


def create_order(creates: list[Doc]) -> list[list[Doc]]:
    """The documents to create in rounds: a job whose ``after`` names another job created by
    this apply (same tenant) comes in a later round than it. Jobs that run after each other in
    a circle are marked failed."""
    rounds: list[list[Doc]] = []
    left = list(creates)
    while left:
        waiting = {d.key for d in left}
        ready = [d for d in left if not any((d.job.tenant, p) in waiting for p in d.job.after)]
        if not ready:
            names = ", ".join(sorted(d.job.name for d in left))
            for d in left:
                d.action = f"failed: after: these jobs run after each other in a cycle: {names}"
            break
        rounds.append(ready)
        left = [d for d in left if d not in ready]
    return rounds


def _create(client: Client, docs: list[Doc]) -> None:
    for i in range(0, len(docs), _CREATE_CHUNK):
        chunk = docs[i : i + _CREATE_CHUNK]
        for doc, made in zip(chunk, client.create_jobs([d.job for d in chunk]), strict=True):
            if isinstance(made, SchedError):
                doc.action = f"failed: {made}"
                continue
            doc.job_id = made.id
            if doc.paused:
                client.pause_job(made.id)


def execute(client: Client, docs: list[Doc], progress: bool) -> None:
    """Create and update as planned; each document's action says what happened."""
    creates = [d for d in docs if d.action == "create"]
    updates = [d for d in docs if d.action == "update"]
    total, done = len(creates) + len(updates), 0

    def tick(n: int) -> None:
        nonlocal done
        done += n
        if progress:
            click.echo(f"\rapplying: {done}/{total}", nl=False, err=True)

    for ready in create_order(creates):  # parents before the jobs that run after them
        _create(client, ready)
        tick(len(ready))
    for doc in updates:
        assert doc.stored is not None
        paths = [p for p in doc.changes if p != "paused"]
        try:
            if paths:
                doc.job.id = doc.job_id
                client.replace_fields(doc.job, paths, expected_version=doc.stored.version)
            if "paused" in doc.changes:
                (client.pause_job if doc.paused else client.resume_job)(doc.job_id)
        except SchedError as exc:
            doc.action = f"failed: {exc}"
        tick(1)
    if progress and total:
        click.echo("", err=True)


def _rows(docs: Docs, dry_run: bool) -> list[dict[str, Any]]:
    """One row per document, limits first (they are applied first)."""
    rows: list[dict[str, Any]] = [
        {"document": d.where, "kind": KIND_LIMITS, "tenant": d.limits.tenant, "name": "",
         "id": "", "action": d.action, "changes": d.changes, "dry_run": dry_run}
        for d in docs.limits
    ]  # fmt: skip
    rows += [
        {"document": d.where, "kind": "Job", "tenant": d.job.tenant, "name": d.job.name,
         "id": d.job_id, "action": d.action, "changes": d.changes, "dry_run": dry_run}
        for d in docs.jobs
    ]  # fmt: skip
    return rows


def _table(rows: list[dict[str, Any]], dry_run: bool) -> Table:
    verb = {"create": "would create", "update": "would update"} if dry_run else {}
    cells = [
        (r["document"], r["kind"], r["tenant"], r["name"], r["id"],
         verb.get(r["action"], r["action"]), ", ".join(r["changes"]))
        for r in rows
    ]  # fmt: skip
    return rows_table(("DOCUMENT", "KIND", "TENANT", "NAME", "ID", "ACTION", "CHANGES"), cells)


def _summary(what: str, actions: list[str], dry_run: bool) -> tuple[str, bool]:
    """``"3 job specs: 1 created, 2 unchanged"`` and whether any failed."""
    counts: dict[str, int] = {}
    for action in actions:
        key = "failed" if action.startswith("failed") else action
        counts[key] = counts.get(key, 0) + 1
    would = "would be " if dry_run else ""
    summary = ", ".join(f"{n} {would}{a}d" if a in ("create", "update") else f"{n} {a}"
                        for a, n in sorted(counts.items()))  # fmt: skip
    return f"{len(actions)} {what}: {summary}", bool(counts.get("failed"))


def _warn_unserved(client: Client, docs: list[Doc]) -> None:
    """One line on stderr per target of the applied jobs that no connected worker serves
    (not an error: their runs wait until one connects)."""
    from schedd.dispatch import unserved_warnings  # here: the node's side, heavy to import

    jobs = [d.job for d in docs if not d.action.startswith("failed")]
    if not jobs:
        return
    try:
        workers = list(client.cluster_status().workers)
    except SchedError:
        return  # the apply is done; a status we cannot read is no reason to fail it
    for warning in unserved_warnings(jobs, workers):
        click.echo(f"schedctl: warning: {warning}", err=True)


@click.command("apply")
@click.option(
    "-f",
    "--filename",
    "paths",
    multiple=True,
    required=True,
    help="A YAML or JSON file of job specs, a directory of them, or - for stdin; repeatable.",
)
@click.option("--dry-run", is_flag=True, help="Print what would change; change nothing.")
@output_option
def apply_cmd(paths: tuple[str, ...], dry_run: bool) -> None:
    """Create or update jobs from specs, matched by tenant and name.

    A spec is what `schedctl job get ID -o yaml` prints (name and schedule.expr, or after:
    [parent names], required; output-only fields ignored); a `kind: TenantLimits` document
    sets a tenant's limits, as `schedctl tenant set` does. `schedctl export` writes both.
    Applying the same specs again changes nothing.
    """
    docs = load(paths, int(time.time() * 1000))
    client = settings().client()
    plan_limits(client, docs.limits)
    plan(client, docs.jobs)
    if not dry_run:
        execute_limits(client, docs.limits)
        execute(client, docs.jobs, progress=sys.stderr.isatty() and len(docs.jobs) > 50)
        _warn_unserved(client, docs.jobs)
    fmt = settings().output
    rows = _rows(docs, dry_run)
    if fmt == "table":
        console().print(_table(rows, dry_run))
    else:
        emit(fmt, rows)
    lines, failed = [], False
    for what, actions in (
        ("tenant limits", [d.action for d in docs.limits]),
        ("job specs", [d.action for d in docs.jobs]),
    ):
        if actions:
            line, bad = _summary(what, actions, dry_run)
            lines.append(line)
            failed = failed or bad
    click.echo("; ".join(lines), err=True)
    if failed:
        sys.exit(1)

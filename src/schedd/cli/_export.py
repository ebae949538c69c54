"""``schedctl export``: a tenant's jobs and limits (or every tenant's) as the documents
``schedctl apply -f`` reads, so a cluster's jobs can be copied to another one.

One document per job, in (tenant, name) order, each a job spec with its defaults left out
(:func:`~schedd.client._spec.job_to_spec`) and its ``paused`` state (a job that runs after
others names them in ``after``, by name); before a tenant's jobs,
one ``kind: TenantLimits`` document when the tenant has limits. ``@every`` and ``@after``
schedules get their anchor written out (``@every 30s from <created>``), so the copy fires at
the same instants. What the API returns is what is written: secrets (HTTP headers, shell
environments) in the clear as the caller may see them.

Exit 0 means the output applies back to the same jobs. Two things cannot: jobs of one tenant
sharing a name (apply knows a job by tenant and name and refuses such a file) and payloads
that are not JSON (apply would send them JSON-encoded). Export names them in one line, writes
nothing and exits 4, unless ``--allow-lossy``: then it writes them all and warns.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click
import yaml

from schedd._errors import NotFound
from schedd.cli._context import settings
from schedd.cli._exit import CONFLICT
from schedd.client import Client, iso_utc, job_to_spec, limits_to_spec, payload_is_json
from schedd.model import DEFAULT_TENANT
from schedd.v1 import job_pb2, scheduler_pb2

#: Jobs asked for per call.
PAGE_SIZE = 1000
#: Names listed in the line about jobs apply cannot recreate; the rest are counted.
_NAMED = 10


class NotRoundTrip(click.ClickException):
    """Jobs the export could not give back to apply as they are (exit 4)."""

    exit_code = CONFLICT


@dataclass
class Export:
    """What one export read: the jobs in (tenant, name, id) order and the tenants' limits."""

    jobs: list[job_pb2.Job] = field(default_factory=list)
    limits: dict[str, scheduler_pb2.TenantLimits] = field(default_factory=dict)

    def documents(self) -> list[dict[str, Any]]:
        """Per tenant (by name) its limits document, then its jobs' specs by name."""
        by_tenant: dict[str, list[dict[str, Any]]] = {t: [] for t in self.limits}
        names = {j.id: j.name for j in self.jobs}  # parents (same tenant) written by name
        for job in self.jobs:
            by_tenant.setdefault(job.tenant, []).append(job_to_spec(job, names=names))
        docs: list[dict[str, Any]] = []
        for tenant in sorted(by_tenant):
            if tenant in self.limits:
                docs.append(limits_to_spec(self.limits[tenant]))
            docs.extend(by_tenant[tenant])
        return docs

    def problems(self) -> list[str]:
        """What apply could not recreate as it is, one phrase per kind (empty: nothing)."""
        named: dict[tuple[str, str], list[str]] = {}
        for job in self.jobs:
            named.setdefault((job.tenant, job.name), []).append(job.id)
        shared = [f"{t}/{n} ({', '.join(ids)})" for (t, n), ids in named.items() if len(ids) > 1]
        raw = [f"{j.tenant}/{j.name} ({j.id})" for j in self.jobs if not payload_is_json(j.payload)]
        out = []
        if shared:
            out.append(f"{len(shared)} names held by more than one job: {_some(shared)}")
        if raw:
            out.append(f"{len(raw)} jobs with a payload that is not JSON: {_some(raw)}")
        return out


def _some(items: list[str]) -> str:
    more = len(items) - _NAMED
    return ", ".join(items[:_NAMED]) + (f" and {more} more" if more > 0 else "")


def read(client: Client, tenant: str, progress: bool) -> Export:
    """Every job of ``tenant`` ("": every tenant the caller may see), page by page, and the
    limits of the tenants exported."""
    out = Export()
    token = ""
    while True:
        page = client.list_jobs_page(tenant=tenant, page_size=PAGE_SIZE, page_token=token)
        out.jobs.extend(page.jobs)
        token = page.next_page_token
        if not token:
            break
        if progress:
            click.echo(f"\rexporting: {len(out.jobs)} jobs read", nl=False, err=True)
    if progress and len(out.jobs) >= PAGE_SIZE:
        click.echo("", err=True)
    out.jobs.sort(key=lambda j: (j.tenant, j.name, j.id))
    if tenant:
        with contextlib.suppress(NotFound):  # a tenant without limits has none to export
            out.limits[tenant] = client.get_tenant_limits(tenant)
    else:
        out.limits = {t.tenant: t for t in client.list_tenant_limits()}
    return out


def render(docs: list[dict[str, Any]], fmt: str, title: str) -> str:
    """The documents as apply reads them: a JSON list, or YAML documents after a comment."""
    if fmt == "json":
        return json.dumps(docs, indent=2, ensure_ascii=False) + "\n"
    head = f"# {title}\n# apply elsewhere with: schedctl apply -f FILE\n"
    body = yaml.safe_dump_all(docs, sort_keys=False, allow_unicode=True, explicit_start=True)
    return head + body


def _write(text: str, path: str | None) -> None:
    if path is None:
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    # Whole or not at all: a failed export never leaves half a file where the last one was.
    tmp = Path(f"{path}.tmp{os.getpid()}")
    try:
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise click.FileError(path, exc.strerror or str(exc)) from exc


def _format(option: str | None, path: str | None) -> str:
    """yaml or json: -o after export, else the global -o, else the file's suffix, else yaml.
    A .json file must hold JSON: apply reads it by its suffix."""
    fmt = option
    if fmt is None:
        given = settings().output
        if given == "jsonl":
            raise click.BadParameter("export writes yaml or json", param_hint="-o/--output")
        fmt = given if given in ("yaml", "json") else None
    suffix = Path(path).suffix.lower() if path else ""
    if fmt is None:
        fmt = "json" if suffix == ".json" else "yaml"
    if suffix == ".json" and fmt != "json":
        raise click.BadParameter(
            f"{path} would hold YAML, but apply reads a .json file as JSON: use -o json or"
            " a .yaml name",
            param_hint="--file",
        )
    return fmt


def _tenant(tenant: str | None, all_tenants: bool) -> str | None:
    """The tenant to export ("": every one), None: the caller's (ask the node)."""
    if all_tenants and tenant is not None:
        raise click.UsageError("give --tenant T or --all-tenants, not both")
    if all_tenants:
        return ""
    if tenant is not None and not tenant.strip():
        raise click.BadParameter("must name a tenant", param_hint="--tenant")
    return tenant


@click.command("export")
@click.option(
    "--tenant", default=None, help="Export this tenant [default: your token's, or default]."
)
@click.option("--all-tenants", is_flag=True, help="Export every tenant you may see.")
@click.option(
    "-o",
    "--output",
    "fmt",
    type=click.Choice(["yaml", "json"]),
    default=None,
    help="Format [default: yaml; json for a --file named *.json].",
)
@click.option(
    "--file", "path", type=click.Path(dir_okay=False), help="Write here instead of stdout."
)
@click.option(
    "--allow-lossy",
    is_flag=True,
    help="Export even jobs apply cannot recreate as they are (names shared by several jobs,"
    " payloads that are not JSON), with a warning.",
)
def export_cmd(
    tenant: str | None, all_tenants: bool, fmt: str | None, path: str | None, allow_lossy: bool
) -> None:
    """Write jobs and tenant limits as the documents `schedctl apply -f` reads.

    One document per job, by tenant and name, defaults left out, with its paused state; a
    `kind: TenantLimits` document for each tenant with limits. Applied to another cluster,
    the same jobs fire at the same times (@every and @after get their anchor written out).
    Exit 4, writing nothing, when some jobs cannot be applied back as they are (see
    --allow-lossy).
    """
    out_fmt = _format(fmt, path)
    scope = _tenant(tenant, all_tenants)
    client = settings().client()
    if scope is None:  # the tenant a create without --tenant uses: the token's, else default
        scope = client.who_am_i().tenant or DEFAULT_TENANT
    found = read(client, scope, progress=sys.stderr.isatty())
    problems = found.problems()
    if problems and not allow_lossy:
        raise NotRoundTrip(
            "; ".join(problems) + ": apply cannot recreate these as they are; rename, fix or"
            " delete them, or pass --allow-lossy"
        )
    what = f"tenant {scope}" if scope else "every tenant"
    title = f"schedctl export of {what} at {iso_utc(int(time.time() * 1000))}"
    _write(render(found.documents(), out_fmt, title), path)
    for line in problems:
        click.echo(f"schedctl: warning: exported anyway: {line}", err=True)
    tenants = len({j.tenant for j in found.jobs} | set(found.limits))
    where = f" to {path}" if path else ""
    click.echo(
        f"exported {len(found.jobs)} jobs and {len(found.limits)} tenant limits"
        f" ({tenants} tenants){where}",
        err=True,
    )

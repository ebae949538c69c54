"""``schedd store migrate``: bring a store to the cluster format this schedd writes (see
docs/operations.md, "Upgrading the store's format")."""

from __future__ import annotations

import asyncio
import sys
from typing import TYPE_CHECKING

import click

from schedd._errors import SchedError
from schedd.cli._store_flags import every_second, store_options

if TYPE_CHECKING:
    from schedd.store import MigrateSummary, StoreConfig

#: Exit status when some jobs kept their ids (run the command again later).
EXIT_KEPT = 3
#: Exit status when the store could not be migrated (an error, nodes running).
EXIT_FAILED = 5


@click.group("store")
def store_group() -> None:
    """The store itself: its format."""


@store_group.command()
@store_options
@click.option("--dry-run", is_flag=True, help="only say what would be renamed; change nothing")
def migrate(store: StoreConfig, prefix: bytes, dry_run: bool) -> None:
    """Bring the store to this schedd's cluster format (2: job ids scoped by tenant), with
    every node stopped. Jobs whose chosen ids are not scoped by their tenant are renamed
    ('nightly' of tenant acme becomes 'acme:nightly'), with their records; a job with an
    execution that may be on a worker keeps its id until a later run. Exit status 3: some
    jobs kept their ids; run it again (nodes stopped) once their executions finished."""
    try:
        summary, before = asyncio.run(_migrate(store, prefix, dry_run))
    except SchedError as exc:
        click.echo(f"schedd store migrate: {exc}", err=True)
        sys.exit(EXIT_FAILED)
    if summary is None:
        click.echo(f"store migrate: the store is at format {before} already; nothing to do")
        return
    verb = "would rename" if dry_run else "renamed"
    for old, new in sorted(summary.renamed.items()):
        click.echo(f"{verb} {old} -> {new}")
    click.echo(f"store migrate: {summary.line()}", err=True)
    sys.exit(EXIT_KEPT if summary.kept or summary.failed else 0)


async def _migrate(
    store: StoreConfig, prefix: bytes, dry_run: bool
) -> tuple[MigrateSummary | None, int]:
    from schedd._errors import FailedPrecondition
    from schedd.coord import FORMAT_VERSION, read_cluster, write_format
    from schedd.store import Keys, migrate_ids, open_store, prefix_end

    kv = await open_store(store)
    try:
        keys = Keys(prefix)
        meta = await read_cluster(kv, keys)
        if meta is None:
            raise FailedPrecondition(f"no cluster under the prefix {prefix.decode()!r}")
        if meta.format_version > FORMAT_VERSION:
            raise FailedPrecondition(
                f"the store holds format {meta.format_version}, newer than this schedd's"
                f" ({FORMAT_VERSION}): run a newer schedd"
            )
        nodes, _ = await kv.range_all(keys.nodes_prefix(), prefix_end(keys.nodes_prefix()))
        if nodes:
            names = ", ".join(keys.parse_node_key(n.key) for n in nodes)
            raise FailedPrecondition(
                f"{len(nodes)} node(s) are running ({names}): stop every node first (a node"
                " that was killed is listed until its lease runs out)"
            )
        progress = every_second("store migrate")

        summary = await migrate_ids(kv, keys, meta.partitions, dry_run=dry_run, progress=progress)
        if meta.format_version == FORMAT_VERSION and not summary.renamed and not summary.kept:
            return None, meta.format_version
        if not dry_run and meta.format_version < FORMAT_VERSION:
            await write_format(kv, keys, FORMAT_VERSION)
            click.echo(f"store migrate: format {meta.format_version} -> {FORMAT_VERSION}", err=True)
        return summary, meta.format_version
    finally:
        await kv.close()

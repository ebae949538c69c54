"""``schedd token create``: the first admin token, written straight into the store.

With auth on, making a token through the API needs an admin token already; this command is
how the first one is made, by whoever can reach the store (the same trust as running a
node). An embedded store is held by its node while it runs: make the first token before
starting it (or stop it), later ones with ``schedctl token create``.
"""

from __future__ import annotations

import asyncio
import socket
import sys

import click

from schedd._clock import SystemClock
from schedd._errors import SchedError
from schedd.auth import ROLES, AuditLog, TokenStore, validate_new_token
from schedd.cli._store_flags import store_options
from schedd.store import Keys, StoreConfig, open_store
from schedd.v1 import auth_pb2


@click.group("token")
def token_group() -> None:
    """Make API tokens directly in the store (bootstrap; later ones: `schedctl token create`)."""


@token_group.command("create")
@store_options
@click.option("--role", type=click.Choice(ROLES), default="admin", show_default=True)
@click.option("--tenant", default="", help="the tenant an editor or viewer token acts for")
@click.option("--description", default="bootstrap", show_default=True)
@click.option("--ttl", "ttl_s", type=click.IntRange(min=0), default=0,
              help="seconds until it expires (0: never)")  # fmt: skip
def create(
    store: StoreConfig,
    prefix: bytes,
    role: str,
    tenant: str,
    description: str,
    ttl_s: int,
) -> None:
    """Make a token and print its bearer string (shown this once) on stdout."""
    try:
        wanted = validate_new_token(
            auth_pb2.ApiToken(role=role, tenant=tenant, description=description), ttl_s * 1000
        )
    except SchedError as exc:
        click.echo(f"schedd token create: {exc}", err=True)
        sys.exit(2)
    keys = Keys(prefix)

    async def make() -> tuple[auth_pb2.ApiToken, str]:
        kv = await open_store(store)
        try:
            clock = SystemClock()
            made = await TokenStore(kv, keys).create(
                wanted, ttl_s * 1000, clock.now_ms(), "bootstrap"
            )
            # In the audit trail like a token made through the API, by "bootstrap".
            audit = AuditLog(kv, keys, f"cli@{socket.gethostname()}", clock, retention_ms=0)
            await audit.record(
                auth_pb2.AuditEntry(
                    actor="bootstrap", role="etcd", tenant=made[0].tenant, method="CreateToken",
                    target=f"{made[0].id} ({made[0].role})", peer="etcd", code="OK",
                )
            )  # fmt: skip
            return made
        finally:
            await kv.close()

    try:
        token, secret = asyncio.run(make())
    except SchedError as exc:
        click.echo(f"schedd token create: {exc}", err=True)
        sys.exit(5)
    who = f"{token.role}" + (f" of tenant {token.tenant!r}" if token.tenant else "")
    click.echo(f"made token {token.id} ({who}); its secret is shown only now:", err=True)
    click.echo(secret)

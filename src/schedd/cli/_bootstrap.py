"""``schedd token create``: the first admin token, written straight into etcd.

With auth on, making a token through the API needs an admin token already; this command is
how the first one is made, by whoever can reach etcd (the same trust as running a node).
"""

from __future__ import annotations

import asyncio
import socket
import sys

import click

from schedd._clock import SystemClock
from schedd._errors import SchedError
from schedd.auth import ROLES, AuditLog, TokenStore, validate_new_token
from schedd.cli._etcd_flags import etcd_config, etcd_options, key_prefix
from schedd.store import Keys, connect_etcd
from schedd.v1 import auth_pb2


@click.group("token")
def token_group() -> None:
    """Make API tokens directly in etcd (bootstrap; later ones: `schedctl token create`)."""


@token_group.command("create")
@etcd_options
@click.option("--role", type=click.Choice(ROLES), default="admin", show_default=True)
@click.option("--tenant", default="", help="the tenant an editor or viewer token acts for")
@click.option("--description", default="bootstrap", show_default=True)
@click.option("--ttl", "ttl_s", type=click.IntRange(min=0), default=0,
              help="seconds until it expires (0: never)")  # fmt: skip
def create(
    etcd_endpoints: str,
    prefix: str,
    etcd_ca: str | None,
    etcd_cert: str | None,
    etcd_key: str | None,
    etcd_server_name: str | None,
    role: str,
    tenant: str,
    description: str,
    ttl_s: int,
) -> None:
    """Make a token and print its bearer string (shown this once) on stdout."""
    config = etcd_config(etcd_endpoints, etcd_ca, etcd_cert, etcd_key, etcd_server_name)
    try:
        wanted = validate_new_token(
            auth_pb2.ApiToken(role=role, tenant=tenant, description=description), ttl_s * 1000
        )
    except SchedError as exc:
        click.echo(f"schedd token create: {exc}", err=True)
        sys.exit(2)
    keys = Keys(key_prefix(prefix))

    async def make() -> tuple[auth_pb2.ApiToken, str]:
        kv = await connect_etcd(config)
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

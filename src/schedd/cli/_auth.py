"""``schedctl token create|list|revoke``, ``schedctl whoami`` and ``schedctl audit list``."""

from __future__ import annotations

import time

import click
from rich.table import Table

from schedd._errors import InvalidArgument
from schedd.auth import ROLES
from schedd.cli._context import output_option, settings
from schedd.cli._output import emit, emit_list, local_time, rows_table
from schedd.client import audit_to_dict, token_to_dict
from schedd.schedule import parse_duration_ms
from schedd.v1 import auth_pb2

_TOKEN_COLUMNS = ("ID", "ROLE", "TENANT", "LIMITS", "DESCRIPTION", "CREATED", "EXPIRES", "STATE")
_AUDIT_COLUMNS = ("TIME", "ACTOR", "ROLE", "TENANT", "METHOD", "TARGET", "FROM", "OUTCOME")


def _limits(token: auth_pb2.ApiToken) -> str:
    parts = []
    if token.queues:
        parts.append("queues " + ",".join(token.queues))
    if token.tenants:
        parts.append("tenants " + ",".join(token.tenants))
    return "; ".join(parts) or "-"


def _state(token: auth_pb2.ApiToken, now_ms: int) -> str:
    if token.revoked_ms:
        return "revoked"
    if token.expires_ms and token.expires_ms <= now_ms:
        return "expired"
    return "active"


def _tokens_table(tokens: list[auth_pb2.ApiToken]) -> Table:
    now = int(time.time() * 1000)
    rows = [
        (
            t.id, t.role, t.tenant or "*", _limits(t), t.description,
            local_time(t.created_ms), local_time(t.expires_ms) if t.expires_ms else "never",
            _state(t, now),
        )
        for t in tokens
    ]  # fmt: skip
    return rows_table(_TOKEN_COLUMNS, rows)


def _emit_tokens(tokens: list[auth_pb2.ApiToken], one: bool) -> None:
    dicts = [token_to_dict(t) for t in tokens]
    if one:
        emit(settings().output, dicts[0], table=lambda: _tokens_table(tokens))
    else:
        emit_list(settings().output, "tokens", dicts, lambda: _tokens_table(tokens))


@click.group("token")
def token_group() -> None:
    """API tokens (admin only): make, list and revoke them."""


@token_group.command("create")
@click.option("--role", type=click.Choice(ROLES), required=True)
@click.option("--tenant", default="", help="The tenant an editor or viewer token acts for.")
@click.option("--description", default="", help="What the token is for.")
@click.option("--ttl", default=None, help="How long it is valid, e.g. 30d, 12h (default: ever).")
@click.option("--queue", "queues", multiple=True, help="Worker tokens: a queue it may serve.")
@click.option(
    "--for-tenant", "tenants", multiple=True, help="Worker tokens: a tenant it may run work of."
)
@output_option
def token_create(
    role: str,
    tenant: str,
    description: str,
    ttl: str | None,
    queues: tuple[str, ...],
    tenants: tuple[str, ...],
) -> None:
    """Make a token. Its secret is printed once, on stdout (table output: alone on the last
    line), and never stored."""
    ttl_s = parse_duration_ms(ttl, "--ttl") / 1000 if ttl else 0
    if ttl is not None and ttl_s <= 0:
        raise InvalidArgument("--ttl", "must be positive")
    resp = settings().client().create_token(
        role, tenant=tenant, description=description, ttl_s=ttl_s,
        queues=list(queues), tenants=list(tenants),
    )  # fmt: skip
    fmt = settings().output
    if fmt == "table":
        who = role + (f" of tenant {tenant!r}" if tenant else "")
        click.echo(f"made token {resp.token.id} ({who}); its secret is shown only now:", err=True)
        click.echo(resp.secret)
        return
    emit(fmt, {**token_to_dict(resp.token), "secret": resp.secret})


@token_group.command("list")
@click.option("--tenant", default="", help="Only this tenant's tokens.")
@click.option("--all", "include_revoked", is_flag=True, help="Include revoked tokens.")
@output_option
def token_list(tenant: str, include_revoked: bool) -> None:
    """The tokens (never their secrets)."""
    client = settings().client()
    _emit_tokens(client.list_tokens(tenant, include_revoked=include_revoked), one=False)


@token_group.command("revoke")
@click.argument("token_id")
@output_option
def token_revoke(token_id: str) -> None:
    """Revoke TOKEN_ID: every node refuses it within a moment, and the streams of a worker
    using it end."""
    _emit_tokens([settings().client().revoke_token(token_id)], one=True)


@click.command("whoami")
@output_option
def whoami() -> None:
    """The token schedctl calls with: its id, role and tenant."""
    _emit_tokens([settings().client().who_am_i()], one=True)


@click.group("audit")
def audit_group() -> None:
    """The audit trail: every change, who made it, from where, and how it ended."""


@audit_group.command("list")
@click.option("--since", default="24h", show_default=True, help="How far back, e.g. 1h, 7d.")
@click.option("--tenant", default="", help="Only this tenant's entries.")
@click.option("--actor", default="", help="Only this token's entries (its id).")
@click.option("--limit", type=click.IntRange(1, 100_000), default=1000, show_default=True)
@output_option
def audit_list(since: str, tenant: str, actor: str, limit: int) -> None:
    """Changes in time order, oldest first (admins see every tenant's, other tokens their
    own tenant's)."""
    since_ms = int(time.time() * 1000) - parse_duration_ms(since, "--since")
    entries = (
        settings().client().list_audit(tenant=tenant, since_ms=since_ms, actor=actor, limit=limit)
    )
    rows = [
        (
            local_time(e.at_ms), e.actor, e.role, e.tenant or "-", e.method,
            e.target or "-", e.peer or "-",
            e.code if e.code == "OK" else f"{e.code}: {e.detail}",
        )
        for e in entries
    ]  # fmt: skip
    dicts = [audit_to_dict(e) for e in entries]
    emit_list(settings().output, "entries", dicts, lambda: rows_table(_AUDIT_COLUMNS, rows))

"""``schedd outbox relay``: send an application's outbox rows to schedd (docs/outbox.md).

SQLAlchemy and psycopg (the ``outbox`` extra) are imported when the command runs, so the rest
of ``schedd`` works without them.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable
from typing import Any, TypeVar, cast

import click

from schedd._errors import InvalidArgument, SchedError
from schedd.cli._serve_flags import metrics_option

_F = TypeVar("_F", bound=Callable[..., Any])
#: --metrics-listen, over plain HTTP (the relay serves no TLS).
_metrics_listen = cast(Callable[[_F], _F], metrics_option(https=False))


@click.group()
def outbox() -> None:
    """The transactional outbox (docs/outbox.md)."""


@outbox.command()
@click.option(
    "--db",
    envvar="SCHEDD_OUTBOX_DB",
    required=True,
    help="the application's database, a SQLAlchemy URL: sqlite:///app.db,"
    " postgresql+psycopg://user@host/db",
)
@click.option(
    "--node",
    envvar="SCHEDD_CONNECT",
    default="127.0.0.1:7070",
    show_default=True,
    help="schedd node address(es), HOST:PORT[,...]",
)
@click.option("--table", default="schedd_outbox", show_default=True)
@click.option(
    "--batch",
    default=100,
    show_default=True,
    type=click.IntRange(1, 10_000),
    help="rows claimed at once",
)
@click.option(
    "--poll-s",
    default=1.0,
    show_default=True,
    type=click.FloatRange(min=0.01),
    help="wait when the outbox is empty (PostgreSQL wakes on NOTIFY sooner)",
)
@click.option(
    "--lease-s",
    default=30.0,
    show_default=True,
    type=click.FloatRange(min=1),
    help="how long a claim holds its rows (a dead relay's rows wait this long)",
)
@click.option(
    "--call-timeout-s",
    default=10.0,
    show_default=True,
    type=click.FloatRange(min=0.1),
    help="deadline of each call to schedd",
)
@click.option(
    "--create-table/--no-create-table",
    default=False,
    show_default=True,
    help="create the outbox table if it does not exist",
)
@click.option(
    "--token",
    envvar="SCHEDD_TOKEN",
    default=None,
    help="API token for clusters with auth on (prefer the env variable)",
)
@click.option("--cacert", default=None, help="CA certificate of the nodes' TLS")
@_metrics_listen
def relay(metrics_listen: str, **flags: Any) -> None:
    """Send the outbox table's unsent rows to schedd, in order, until SIGINT or SIGTERM."""
    try:
        code = asyncio.run(_relay(metrics_listen, **flags))
    except ImportError as exc:
        click.echo(
            f"schedd outbox relay: needs the outbox extra (pip install 'schedd[outbox]'): {exc}",
            err=True,
        )
        sys.exit(1)
    except InvalidArgument as exc:
        click.echo(f"schedd outbox relay: {exc}", err=True)
        sys.exit(2)
    except SchedError as exc:
        click.echo(f"schedd outbox relay: {exc}", err=True)
        sys.exit(1)
    sys.exit(code)


async def _relay(
    metrics_listen: str,
    *,
    db: str,
    node: str,
    table: str,
    batch: int,
    poll_s: float,
    lease_s: float,
    call_timeout_s: float,
    create_table: bool,
    token: str | None,
    cacert: str | None,
) -> int:
    from sqlalchemy.exc import ArgumentError, NoSuchModuleError

    from schedd._stop_signal import stop_on_signals
    from schedd.obs import PrometheusRecorder, metrics_server
    from schedd.outbox import Relay, RelayConfig

    cfg = RelayConfig(
        table=table,
        batch=batch,
        poll_s=poll_s,
        lease_s=lease_s,
        call_timeout_s=call_timeout_s,
        create_table=create_table,
    )
    recorder = PrometheusRecorder(("outbox",)) if metrics_listen else None
    try:
        r = Relay(db, node, cfg, recorder=recorder, token=token, tls=cacert)
    except (ArgumentError, NoSuchModuleError) as exc:
        raise InvalidArgument("db", f"not a database URL SQLAlchemy can use: {exc}") from None
    server = metrics_server(recorder, metrics_listen) if recorder is not None else None
    if server is not None:
        await server.start()
    stop = stop_on_signals()
    task = asyncio.ensure_future(r.run())
    stopping = asyncio.ensure_future(stop.wait())
    await asyncio.wait([task, stopping], return_when=asyncio.FIRST_COMPLETED)
    if not task.done():
        await r.stop()
    stopping.cancel()
    if server is not None:
        await server.stop()
    task.result()  # a crash of the relay is raised here
    return 0

"""``schedctl``: the command line over :mod:`schedd.client`.

Noun then verb, like ``temporal schedule ...``::

    schedctl job create report --schedule "0 9 * * 1-5" --tz Europe/Berlin --handler send_report
    schedctl run list --job j-abc --state failed -o json
    schedctl preview "30 2 * * *" --tz America/New_York --after 2026-03-07T00:00:00Z

Data goes to stdout; an error is one line on stderr. Exit codes: 0 ok, 1 error, 2 usage or
bad input, 3 not found, 4 conflict (ALREADY_EXISTS, ABORTED, FAILED_PRECONDITION),
5 unavailable (also: no endpoint answered; the line names each one), 6 not authenticated or
not allowed (UNAUTHENTICATED, PERMISSION_DENIED).

With several endpoints (``--endpoints a:7070,b:7070`` or ``--endpoint`` repeated) a node that
is down is skipped and reads are sent again to the next one (see ``schedd.client._failover``).

TLS takes etcdctl's flags (``--cacert``, ``--cert``, ``--key``) and kubectl's
``--tls-server-name``; a node that refuses them is one line saying what to change::

    schedctl: error: the node at 127.0.0.1:7070 requires a client certificate: pass --cert FILE
    and --key FILE
"""

from __future__ import annotations

import os
import sys

# gRPC's core logs a failed TLS handshake on stderr ("Handshake failed with error ...")
# besides failing the call; schedctl says it in its own one line instead. gRPC reads this
# once, when it is first imported: so before the imports below, and only when it is not
# imported yet (a program that imports schedctl keeps its children's environment).
if "grpc" not in sys.modules:
    os.environ.setdefault("GRPC_VERBOSITY", "NONE")
from collections.abc import Sequence
from typing import Any, NoReturn

import click

from schedd._errors import SchedError, TlsHandshakeFailed
from schedd._tls import TlsConfigError
from schedd.cli._apply import apply_cmd
from schedd.cli._auth import audit_group, token_group, whoami
from schedd.cli._context import DEFAULT_ENDPOINT, Settings, join_endpoints
from schedd.cli._exit import ERROR, NOT_FOUND, UNAVAILABLE, USAGE, exit_code, report, tls_advice
from schedd.cli._export import export_cmd
from schedd.cli._jobs import job_group
from schedd.cli._output import FORMATS
from schedd.cli._preview import preview
from schedd.cli._queues import queue_group
from schedd.cli._runs import cluster_group, dlq_group, run_group, worker_group
from schedd.cli._tenants import tenant_group
from schedd.client import ClientTls

__all__ = ["cli", "main"]


class _Schedctl(click.Group):
    """A group whose errors are one line on stderr and a meaningful exit code."""

    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> NoReturn:
        try:
            code = super().main(
                args, prog_name or "schedctl", complete_var, standalone_mode=False, **extra
            )
            sys.exit(code if isinstance(code, int) else 0)
        except click.UsageError as exc:
            report(_usage_message(exc))
            sys.exit(USAGE)
        except click.ClickException as exc:
            report(exc.format_message())
            sys.exit(exc.exit_code if exc.exit_code != 1 else ERROR)
        except click.Abort:
            report("aborted")
            sys.exit(ERROR)
        except TlsHandshakeFailed as exc:
            report(tls_advice(exc))
            sys.exit(UNAVAILABLE)
        except SchedError as exc:
            code = exit_code(exc)
            kind = {NOT_FOUND: "not found: ", UNAVAILABLE: "unavailable: "}.get(code, "")
            report(kind + (str(exc) or type(exc).__name__))
            sys.exit(code)
        except KeyboardInterrupt:
            sys.exit(130)
        except BrokenPipeError:
            sys.exit(ERROR)


def _usage_message(exc: click.UsageError) -> str:
    message = exc.format_message()
    if exc.ctx is not None:
        return f"{exc.ctx.command_path}: {message}"
    return message


@click.group(cls=_Schedctl, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--endpoints",
    envvar="SCHEDCTL_ENDPOINTS",
    default=None,
    help="Comma-separated HOST:PORT of scheduler nodes, tried in turn when one is down"
    f" (env SCHEDCTL_ENDPOINTS; default {DEFAULT_ENDPOINT}).",
)
@click.option(
    "--endpoint",
    "endpoint_list",
    multiple=True,
    help="One HOST:PORT of a scheduler node; repeat for several (added to --endpoints).",
)
@click.option(
    "--timeout",
    type=click.FloatRange(min=0, min_open=True),
    default=10.0,
    show_default=True,
    help="Deadline of each call, in seconds.",
)
@click.option(
    "--token",
    envvar="SCHEDCTL_TOKEN",
    default=None,
    help="API token (sdt_...) for clusters with auth on (env SCHEDCTL_TOKEN; prefer the env"
    " variable: a flag shows in the process list).",
)
@click.option("-o", "--output", type=click.Choice(FORMATS), default="table", show_default=True)
@click.option(
    "--cacert",
    envvar="SCHEDCTL_CACERT",
    type=click.Path(dir_okay=False),
    help="Connect over TLS, verifying the nodes' certificates against this CA (PEM; env"
    " SCHEDCTL_CACERT).",
)
@click.option(
    "--cert",
    envvar="SCHEDCTL_CERT",
    type=click.Path(dir_okay=False),
    help="Client certificate (PEM, with --key) for nodes that require one (env SCHEDCTL_CERT).",
)
@click.option(
    "--key",
    envvar="SCHEDCTL_KEY",
    type=click.Path(dir_okay=False),
    help="Private key of --cert (PEM, not encrypted; env SCHEDCTL_KEY).",
)
@click.option(
    "--tls-server-name",
    envvar="SCHEDCTL_TLS_SERVER_NAME",
    help="Name the nodes' certificates must hold, when not the host dialled (env"
    " SCHEDCTL_TLS_SERVER_NAME).",
)
@click.version_option(package_name="schedd", prog_name="schedctl")
@click.pass_context
def cli(
    ctx: click.Context,
    endpoints: str | None,
    endpoint_list: tuple[str, ...],
    timeout: float,
    token: str | None,
    output: str,
    cacert: str | None,
    cert: str | None,
    key: str | None,
    tls_server_name: str | None,
) -> None:
    """Manage schedd jobs, executions and the cluster."""
    obj = ctx.ensure_object(Settings)
    obj.endpoints = join_endpoints(endpoints, endpoint_list)
    obj.timeout_s, obj.output = timeout, output
    obj.token = token or None
    obj.tls = client_tls(cacert, cert, key, tls_server_name)
    ctx.call_on_close(obj.close)


#: ClientTls' settings as schedctl's flags name them.
TLS_FLAGS = {
    "ca_file": "--cacert",
    "cert_file": "--cert",
    "key_file": "--key",
    "server_name": "--tls-server-name",
}


def client_tls(
    cacert: str | None, cert: str | None, key: str | None, server_name: str | None
) -> ClientTls | None:
    """The TLS flags as a ClientTls, its files read now (None: none given: plaintext).

    Raises:
        click.BadParameter: A flag whose file cannot be used, named.
    """
    if not (cacert or cert or key or server_name):
        return None
    try:
        tls = ClientTls(ca_file=cacert, cert_file=cert, key_file=key, server_name=server_name)
        _ = tls.material
    except TlsConfigError as exc:
        raise click.BadParameter(exc.reason(TLS_FLAGS), param_hint=TLS_FLAGS[exc.field]) from exc
    return tls


cli.add_command(job_group)
cli.add_command(token_group)
cli.add_command(audit_group)
cli.add_command(whoami)
cli.add_command(run_group)
cli.add_command(dlq_group)
cli.add_command(worker_group)
cli.add_command(cluster_group)
cli.add_command(queue_group)
cli.add_command(tenant_group)
cli.add_command(apply_cmd)
cli.add_command(export_cmd)
cli.add_command(preview)


def main(argv: Sequence[str] | None = None) -> None:
    """Console entry point of ``schedctl``."""
    cli.main(args=list(argv) if argv is not None else None, prog_name="schedctl")

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
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any, NoReturn

import click

from schedd._errors import SchedError
from schedd.cli._apply import apply_cmd
from schedd.cli._auth import audit_group, token_group, whoami
from schedd.cli._context import DEFAULT_ENDPOINT, Settings, join_endpoints
from schedd.cli._exit import ERROR, NOT_FOUND, UNAVAILABLE, USAGE, exit_code, report
from schedd.cli._jobs import job_group
from schedd.cli._output import FORMATS
from schedd.cli._preview import preview
from schedd.cli._runs import cluster_group, dlq_group, run_group, worker_group
from schedd.cli._tenants import tenant_group

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
@click.version_option(package_name="schedd", prog_name="schedctl")
@click.pass_context
def cli(
    ctx: click.Context,
    endpoints: str | None,
    endpoint_list: tuple[str, ...],
    timeout: float,
    token: str | None,
    output: str,
) -> None:
    """Manage schedd jobs, executions and the cluster."""
    obj = ctx.ensure_object(Settings)
    obj.endpoints = join_endpoints(endpoints, endpoint_list)
    obj.timeout_s, obj.output = timeout, output
    obj.token = token or None
    ctx.call_on_close(obj.close)


cli.add_command(job_group)
cli.add_command(token_group)
cli.add_command(audit_group)
cli.add_command(whoami)
cli.add_command(run_group)
cli.add_command(dlq_group)
cli.add_command(worker_group)
cli.add_command(cluster_group)
cli.add_command(tenant_group)
cli.add_command(apply_cmd)
cli.add_command(preview)


def main(argv: Sequence[str] | None = None) -> None:
    """Console entry point of ``schedctl``."""
    cli.main(args=list(argv) if argv is not None else None, prog_name="schedctl")

"""The flags of ``schedd worker`` and ``schedd dev`` that say which job kinds a worker runs
(HTTP by default, shell only when allowed) and how, turned into executor configurations."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import click

if TYPE_CHECKING:
    from schedd.worker import HttpConfig, ShellConfig

F = TypeVar("F", bound=Callable[..., Any])

_OPTIONS = [
    click.option(
        "--http/--no-http",
        "http_on",
        default=True,
        show_default=True,
        help="run HTTP jobs (webhooks) and tell the nodes so",
    ),
    click.option(
        "--http-allow",
        "http_allow",
        multiple=True,
        metavar="HOST",
        help="only call these hosts (repeatable; *.example.com for subdomains; default: any)",
    ),
    click.option(
        "--http-allow-link-local",
        is_flag=True,
        help="also call link-local and cloud metadata addresses (169.254.169.254, ...)",
    ),
    click.option(
        "--http-max-per-host",
        default=8,
        show_default=True,
        type=click.IntRange(1, 10_000),
        help="the bulkhead: requests in flight per host (as many may wait; more are retried)",
    ),
    click.option(
        "--http-bulkhead-wait",
        default=1.0,
        show_default=True,
        type=click.FloatRange(0, 60),
        help="seconds an attempt may wait for a place under --http-max-per-host",
    ),
    click.option(
        "--http-breaker-failures",
        default=5,
        show_default=True,
        type=click.IntRange(1, 1_000),
        help="consecutive retryable failures that open a target host's circuit",
    ),
    click.option(
        "--http-breaker-cooldown",
        default=10.0,
        show_default=True,
        type=click.FloatRange(0.1, 3600, min_open=False),
        help="seconds a host's circuit stays open before one trial request",
    ),
    click.option("--http-max-redirects", default=3, show_default=True, type=click.IntRange(0, 20)),
    click.option(
        "--http-ca-file",
        default=None,
        type=click.Path(exists=True, dir_okay=False),
        help="CA bundle to verify targets' TLS certificates with (default: the system's)",
    ),
    click.option(
        "--allow-shell",
        is_flag=True,
        help="run shell jobs (argv executed on this machine, without a shell)",
    ),
    click.option(
        "--shell-allow",
        "shell_allow",
        multiple=True,
        metavar="EXE",
        help="only these executables for shell jobs (repeatable; a path, or a name on PATH)",
    ),
    click.option(
        "--shell-kill-grace",
        default=3.0,
        show_default=True,
        type=click.FloatRange(0, 4.5),
        help="seconds between SIGTERM and SIGKILL to a shell job's process group (< 5 s)",
    ),
]


def job_kind_options(fn: F) -> F:
    """Adds the job-kind flags to a click command (they arrive as keyword arguments)."""
    for option in reversed(_OPTIONS):
        fn = option(fn)
    return fn


def job_kind_configs(kinds: dict[str, Any]) -> tuple[HttpConfig | None, ShellConfig | None]:
    """The HTTP and shell executor configurations the flags ask for (None: that kind off).

    Raises:
        click.UsageError: --shell-allow or --shell-kill-grace without --allow-shell.
    """
    from schedd.worker import HttpConfig

    http = None
    if kinds["http_on"]:
        http = HttpConfig(
            allow_hosts=tuple(kinds["http_allow"]),
            allow_link_local=kinds["http_allow_link_local"],
            max_redirects=kinds["http_max_redirects"],
            max_per_host=kinds["http_max_per_host"],
            bulkhead_wait_s=kinds["http_bulkhead_wait"],
            breaker_failures=kinds["http_breaker_failures"],
            breaker_cooldown_s=kinds["http_breaker_cooldown"],
            ca_file=kinds["http_ca_file"],
        )
    shell = None
    if kinds["allow_shell"]:
        from schedd.worker import ShellConfig

        shell = ShellConfig(
            allowed=tuple(kinds["shell_allow"]), kill_grace_s=kinds["shell_kill_grace"]
        )
    elif kinds["shell_allow"]:
        raise click.UsageError("--shell-allow needs --allow-shell")
    return http, shell

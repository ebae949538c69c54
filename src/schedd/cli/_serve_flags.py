"""The serving flags of ``schedd node``, ``schedd worker`` and ``schedd dev``: TLS, the
metrics endpoint and the web dashboard, each declared once with its env variable and help."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

from schedd._tls import TlsConfigError, TlsFiles

#: TlsFiles' settings as the flags of ``schedd node`` and ``schedd worker`` name them.
TLS_FLAGS = {
    "cert_file": "--tls-cert-file",
    "key_file": "--tls-key-file",
    "ca_file": "--tls-ca-file",
    "server_name": "--tls-server-name",
}
#: Each TLS flag's help, for a node and for a worker.
_TLS_HELP = {
    "node": {
        "cert_file": "serve gRPC over TLS with this certificate (PEM, with --tls-key-file); the"
        " dashboard and metrics then serve HTTPS with it, asking no client certificate",
        "key_file": "the private key of --tls-cert-file (PEM, not encrypted)",
        "ca_file": "require client certificates signed by this CA (PEM): workers, schedctl and"
        " peers (mutual TLS); peers' certificates are verified against it too",
        "server_name": "name the peers' certificates are verified against, when they do not"
        " hold the host each peer advertises",
    },
    "worker": {
        "cert_file": "client certificate for nodes that require one (PEM, with"
        " --tls-key-file); --metrics-listen then serves HTTPS with it",
        "key_file": "the private key of --tls-cert-file (PEM, not encrypted)",
        "ca_file": "connect over TLS, verifying the nodes' certificates against this CA (PEM;"
        " without it but with another --tls-* flag: the system's CAs)",
        "server_name": "name the nodes' certificates must hold (default: the host dialled)",
    },
}

F = TypeVar("F", bound=Callable[..., Any])


def _check_listen(ctx: click.Context, param: click.Parameter, value: str) -> str:
    port = value.rpartition(":")[2]
    if value and (not port.isdigit() or not 0 <= int(port) <= 65535):
        raise click.BadParameter(f"give HOST:PORT, got {value!r}")
    return value


#: The help's note on HTTPS, for commands that take --tls-cert-file.
_HTTPS_NOTE = ", or https:// with --tls-cert-file (no client certificate asked)"


def metrics_option(func: F | None = None, *, default: str = "", https: bool = True) -> Any:
    """``--metrics-listen HOST:PORT``: serve Prometheus metrics at /metrics ("": off);
    ``https``: the command serves it over HTTPS with its --tls-cert-file (said in the help)."""

    def wrap(f: F) -> F:
        return click.option(
            "--metrics-listen",
            envvar="SCHEDD_METRICS_LISTEN",
            default=default,
            show_default=bool(default),
            callback=_check_listen,
            help="serve Prometheus metrics at http://HOST:PORT/metrics"
            + (_HTTPS_NOTE if https else "")
            + (" ('' turns it off)" if default else " (default: off)"),
        )(f)

    return wrap(func) if func is not None else wrap


def http_options(func: F | None = None, *, default: str = "", https: bool = True) -> Any:
    """``--http-listen HOST:PORT`` (the web dashboard; "": off) and ``--http-actions``."""

    def wrap(f: F) -> F:
        f = click.option(
            "--http-actions/--no-http-actions",
            envvar="SCHEDD_HTTP_ACTIONS",
            default=False,
            show_default=True,
            help="let the dashboard pause, resume, trigger and redrive (each confirmed, with a"
            " CSRF token); off: read-only",
        )(f)
        return click.option(
            "--http-listen",
            envvar="SCHEDD_HTTP_LISTEN",
            default=default,
            show_default=bool(default),
            callback=_check_listen,
            help="serve the web dashboard at http://HOST:PORT/"
            + (_HTTPS_NOTE if https else "")
            + (" ('' turns it off)" if default else " (default: off)"),
        )(f)

    return wrap(func) if func is not None else wrap


def tls_options(role: str) -> Callable[[F], F]:
    """``--tls-cert-file``, ``--tls-key-file``, ``--tls-ca-file``, ``--tls-server-name``
    (env ``SCHEDD_TLS_CERT_FILE``...), with the help of ``role`` (node or worker)."""

    def wrap(f: F) -> F:
        for field, flag in reversed(TLS_FLAGS.items()):
            kind = None if field == "server_name" else click.Path(dir_okay=False)
            f = click.option(
                flag,
                "tls_" + field,
                envvar="SCHEDD_" + flag.removeprefix("--").replace("-", "_").upper(),
                default=None,
                type=kind,
                help=_TLS_HELP[role][field],
            )(f)
        return f

    return wrap


def tls_files(
    cert_file: str | None,
    key_file: str | None,
    ca_file: str | None,
    server_name: str | None,
    *,
    server: bool,
) -> TlsFiles | None:
    """The TLS flags as TlsFiles, their files read now (None: no TLS flag given).

    Raises:
        click.BadParameter: A flag that cannot be used, named (a node needs a certificate).
    """
    if not (cert_file or key_file or ca_file or server_name):
        return None
    try:
        tls = TlsFiles(
            cert_file=cert_file, key_file=key_file, ca_file=ca_file, server_name=server_name
        )
        if server:
            tls.check_server()
        else:
            _ = tls.material
    except TlsConfigError as exc:
        raise click.BadParameter(exc.reason(TLS_FLAGS), param_hint=TLS_FLAGS[exc.field]) from exc
    return tls

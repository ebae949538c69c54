"""The etcd connection flags of the ``schedd`` commands that talk to etcd themselves
(``schedd token create``, ``schedd keys rekey``), and the one translation of an
:class:`~schedd.store.EtcdConfig` error into the flag it is about."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

from schedd.store import EtcdConfig

F = TypeVar("F", bound=Callable[..., Any])

#: EtcdConfig's TLS settings, named in its errors, and the flags that set them.
_FLAGS = {
    "ca_file": "--etcd-ca",
    "cert_file": "--etcd-cert",
    "key_file": "--etcd-key",
    "server_name": "--etcd-server-name",
}


def etcd_options(func: F) -> F:
    """``--etcd``, ``--prefix`` and the etcd TLS flags, with the node's env variables."""
    path = click.Path(dir_okay=False, exists=True)
    for option in reversed(
        [
            click.option("--etcd", "etcd_endpoints", envvar="SCHEDD_ETCD",
                         default="127.0.0.1:2379", show_default=True,
                         help="etcd endpoints, HOST:PORT[,...]"),
            click.option("--prefix", envvar="SCHEDD_ETCD_PREFIX", default="/schedd/v1/",
                         show_default=True, help="the cluster's etcd key prefix"),
            click.option("--etcd-ca", envvar="SCHEDD_ETCD_CA", default=None, type=path),
            click.option("--etcd-cert", envvar="SCHEDD_ETCD_CERT", default=None, type=path),
            click.option("--etcd-key", envvar="SCHEDD_ETCD_KEY", default=None, type=path),
            click.option("--etcd-server-name", envvar="SCHEDD_ETCD_SERVER_NAME", default=None),
        ]
    ):  # fmt: skip
        func = option(func)
    return func


def etcd_config(
    endpoints: str,
    ca: str | None = None,
    cert: str | None = None,
    key: str | None = None,
    server_name: str | None = None,
) -> EtcdConfig:
    """The etcd settings the flags give.

    Raises:
        click.BadParameter: naming the flag (``--etcd``, ``--etcd-cert`` ...).
    """
    try:
        parsed = EtcdConfig.parse_endpoints(endpoints)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--etcd") from exc
    try:
        return EtcdConfig(
            endpoints=parsed, ca_file=ca, cert_file=cert, key_file=key, server_name=server_name
        )
    except ValueError as exc:
        message = str(exc)
        for field, flag in _FLAGS.items():
            message = message.replace(field, flag)
        hint = _FLAGS.get(str(exc).split()[0], "--etcd-ca")
        raise click.BadParameter(message, param_hint=hint) from exc


def key_prefix(prefix: str) -> bytes:
    """``--prefix`` as the key prefix (with its trailing slash)."""
    return (prefix if prefix.endswith("/") else prefix + "/").encode()

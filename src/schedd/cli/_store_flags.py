"""The store flags of the ``schedd`` commands that open the store themselves (``schedd node``,
``schedd token create``, ``schedd keys rekey``): where it is, its key prefix, etcd's TLS, and
the one translation of a bad value into the flag it is about."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

import click

from schedd.store import EtcdConfig, RocksConfig, StoreConfig, parse_store

F = TypeVar("F", bound=Callable[..., Any])

#: EtcdConfig's TLS settings, named in its errors, and the flags that set them.
_FLAGS = {
    "ca_file": "--etcd-ca",
    "cert_file": "--etcd-cert",
    "key_file": "--etcd-key",
    "server_name": "--etcd-server-name",
}
#: Where the store is when no flag or variable says.
DEFAULT_STORE = "etcd://127.0.0.1:2379"


def store_options(func: F) -> F:
    """``--store``, ``--prefix`` and the etcd TLS flags (``--etcd``: the older way to name an
    etcd store), with their env variables. The command receives ``store`` (a
    :class:`StoreConfig`) and ``prefix`` (bytes, ending in ``/``) in their place."""

    @functools.wraps(func)
    def wrapper(
        *args: Any,
        store: str | None,
        etcd_endpoints: str | None,
        prefix: str,
        etcd_ca: str | None,
        etcd_cert: str | None,
        etcd_key: str | None,
        etcd_server_name: str | None,
        **kwargs: Any,
    ) -> Any:
        config = store_config(store, etcd_endpoints, etcd_ca, etcd_cert, etcd_key, etcd_server_name)
        return func(*args, store=config, prefix=key_prefix(prefix), **kwargs)

    path = click.Path(dir_okay=False, exists=True)
    decorated: Any = wrapper
    for option in reversed(
        [
            click.option("--store", envvar="SCHEDD_STORE", default=None,
                         help="where jobs and executions live: rocksdb:PATH (one machine) or"
                         f" etcd://HOST:PORT[,...] (a cluster)  [default: {DEFAULT_STORE}]"),
            click.option("--etcd", "etcd_endpoints", envvar="SCHEDD_ETCD", default=None,
                         help="etcd endpoints HOST:PORT[,...]: the same as --store etcd://..."),
            click.option("--prefix", envvar="SCHEDD_ETCD_PREFIX", default="/schedd/v1/",
                         show_default=True, help="the cluster's key prefix in the store"),
            click.option("--etcd-ca", envvar="SCHEDD_ETCD_CA", default=None, type=path),
            click.option("--etcd-cert", envvar="SCHEDD_ETCD_CERT", default=None, type=path),
            click.option("--etcd-key", envvar="SCHEDD_ETCD_KEY", default=None, type=path),
            click.option("--etcd-server-name", envvar="SCHEDD_ETCD_SERVER_NAME", default=None,
                         help="name the etcd members' certificates are verified against (TLS"
                         " with several endpoints; default: their host name when they share one)"),
        ]
    ):  # fmt: skip
        decorated = option(decorated)
    return decorated  # type: ignore[no-any-return]


def store_config(
    store: str | None,
    etcd_endpoints: str | None = None,
    ca: str | None = None,
    cert: str | None = None,
    key: str | None = None,
    server_name: str | None = None,
) -> StoreConfig:
    """The store the flags name.

    Raises:
        click.BadParameter: naming the flag (``--store``, ``--etcd``, ``--etcd-cert`` ...).
    """
    if store and etcd_endpoints:
        raise click.BadParameter(
            f"give the store once: --store {store} or --etcd {etcd_endpoints}, not both",
            param_hint="--store",
        )
    hint = "--etcd" if etcd_endpoints else "--store"
    try:
        parsed = parse_store(store or etcd_endpoints or DEFAULT_STORE)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint=hint) from exc
    if isinstance(parsed, RocksConfig):
        tls = {"ca_file": ca, "cert_file": cert, "key_file": key, "server_name": server_name}
        given = [_FLAGS[name] for name, value in tls.items() if value]
        if given:
            raise click.BadParameter(
                f"{given[0]} applies to an etcd store; {parsed.address} is embedded",
                param_hint=given[0],
            )
        return parsed
    try:
        return EtcdConfig(
            endpoints=parsed.endpoints,
            ca_file=ca,
            cert_file=cert,
            key_file=key,
            server_name=server_name,
        )
    except ValueError as exc:
        message = str(exc)
        for field, flag in _FLAGS.items():
            message = message.replace(field, flag)
        flag = _FLAGS.get(str(exc).split()[0], "--etcd-ca")
        raise click.BadParameter(message, param_hint=flag) from exc


def key_prefix(prefix: str) -> bytes:
    """``--prefix`` as the key prefix (with its trailing slash)."""
    return (prefix if prefix.endswith("/") else prefix + "/").encode()


class _Progress(Protocol):
    def progress(self) -> str: ...


def every_second(label: str) -> Callable[[_Progress], None]:
    """A progress callback for long store work: ``label: <its progress()>`` on stderr, at
    most once a second."""
    last = [0.0]

    def say(summary: _Progress) -> None:
        now = time.monotonic()
        if now - last[0] >= 1.0:
            last[0] = now
            click.echo(f"{label}: {summary.progress()}", err=True)

    return say

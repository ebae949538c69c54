"""Encryption at rest on the command line: ``--encryption-keys`` (the node's keyring), and
``schedd keys generate`` / ``schedd keys rekey`` (see docs/operations.md, "Encryption at
rest")."""

from __future__ import annotations

import asyncio
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from schedd._errors import SchedError
from schedd.cli._store_flags import every_second, store_options

if TYPE_CHECKING:
    from schedd.store import Keyring, RekeySummary, StoreConfig

F = TypeVar("F", bound=Callable[..., Any])

#: ``schedd keys rekey`` exits with this when a record is left under an old key.
EXIT_LEFT = 3


def encryption_keys_option(func: F) -> F:
    """``--encryption-keys FILE`` (``SCHEDD_ENCRYPTION_KEYS``): the keyring file."""
    return click.option(
        "--encryption-keys",
        envvar="SCHEDD_ENCRYPTION_KEYS",
        default=None,
        type=click.Path(dir_okay=False),
        help="keyring file (lines '<key id> <base64 key>', the last one encrypts): payloads,"
        " checkpoints, HTTP header and shell env values are encrypted in etcd"
        " (see 'schedd keys generate')",
    )(func)


def load_keyring(path: str | None) -> Keyring | None:
    """The keyring at ``path`` (None: none given); a bad file is a usage error naming it."""
    from schedd.store import Keyring

    if not path:
        return None
    try:
        return Keyring.from_file(Path(path))
    except SchedError as exc:
        raise click.BadParameter(str(exc), param_hint="--encryption-keys") from exc


@click.group("keys")
def keys() -> None:
    """Encryption keys: make one, re-encrypt every record with the newest."""


@keys.command()
@click.option("--id", "key_id", default=None, help="the key's id (default: k<UTC time>)")
@click.option(
    "--append",
    "append_to",
    default=None,
    type=click.Path(dir_okay=False),
    help="add the key to this keyring file (created, mode 600, if absent) instead of printing it;"
    " it becomes the key new records are encrypted with",
)
def generate(key_id: str | None, append_to: str | None) -> None:
    """Make a new key: print its keyring line ('<key id> <base64 of 32 random bytes>')."""
    from schedd.store import EncryptionKey, read_keyring_file

    key_id = key_id or time.strftime("k%Y%m%dT%H%M%SZ", time.gmtime())
    try:
        key = EncryptionKey.generate(key_id)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--id") from exc
    if append_to is None:
        click.echo(key.line())
        return
    path = Path(append_to)
    if path.exists():
        try:
            known = [k.key_id for k in read_keyring_file(path, warn=False)]
        except SchedError as exc:
            raise click.BadParameter(str(exc), param_hint="--append") from exc
        if key_id in known:
            raise click.BadParameter(f"{path} has a key {key_id!r} already", param_hint="--id")
    text = path.read_text() if path.exists() else ""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    with os.fdopen(fd, "a") as f:
        if not text:
            f.write("# schedd encryption keys: <key id> <base64 key>; the last one encrypts\n")
        elif not text.endswith("\n"):
            f.write("\n")
        f.write(key.line() + "\n")
    click.echo(f"key {key_id!r} added to {path}", err=True)


@keys.command()
@store_options
@click.option(
    "--encryption-keys",
    envvar="SCHEDD_ENCRYPTION_KEYS",
    required=True,
    type=click.Path(dir_okay=False),
    help="keyring file: every key in use, the newest last (it encrypts)",
)
def rekey(
    store: StoreConfig,
    prefix: bytes,
    encryption_keys: str,
) -> None:
    """Re-encrypt every record with the newest key of the keyring (and encrypt those written
    in plaintext), then forget the keys no record uses. Safe while nodes run: each record is
    compared on its revision, and retried when it changed meanwhile. Run it once every node
    writes with the newest key. Exit status 3: some records still use an older key (live
    executions; run it again once they finish)."""
    keyring = load_keyring(encryption_keys)
    assert keyring is not None
    try:
        summary = asyncio.run(_rekey(store, prefix, keyring))
    except SchedError as exc:
        click.echo(f"schedd keys rekey: {exc}", err=True)
        sys.exit(5)
    click.echo(f"rekey: {summary.line()}", err=True)
    sys.exit(EXIT_LEFT if summary.in_use or summary.failed else 0)


async def _rekey(store: StoreConfig, prefix: bytes, keyring: Keyring) -> RekeySummary:
    from schedd._errors import FailedPrecondition
    from schedd.coord import read_cluster
    from schedd.store import Keys, open_store, rekey

    kv = await open_store(store)
    try:
        keys = Keys(prefix)
        meta = await read_cluster(kv, keys)
        if meta is None:
            raise FailedPrecondition(f"no cluster under the prefix {prefix.decode()!r}")
        progress = every_second("rekey")

        click.echo(f"rekey: encrypting with key {keyring.active.key_id!r}", err=True)
        return await rekey(kv, keys, keyring, meta.partitions, progress=progress)
    finally:
        await kv.close()

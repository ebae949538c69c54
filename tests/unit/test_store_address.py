"""One store address picks the backend: parsing, the flags' errors, opening each kind."""

from __future__ import annotations

from pathlib import Path

import click
import pytest

from schedd._errors import FailedPrecondition
from schedd.cli._store_flags import store_config
from schedd.store import (
    EtcdConfig,
    RocksConfig,
    RocksKV,
    open_store,
    parse_store,
    store_address,
)


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("rocksdb:/var/lib/schedd", RocksConfig(Path("/var/lib/schedd"))),
        ("rocksdb:///var/lib/schedd", RocksConfig(Path("/var/lib/schedd"))),
        ("rocksdb:data/store", RocksConfig(Path("data/store"))),
        (" rocksdb:/x ", RocksConfig(Path("/x"))),
    ],
)
def test_embedded_addresses(text: str, want: RocksConfig) -> None:
    assert parse_store(text) == want
    assert parse_store(store_address(want)) == want


@pytest.mark.parametrize(
    ("text", "endpoints"),
    [
        ("etcd://127.0.0.1:2379", ("127.0.0.1:2379",)),
        ("etcd://10.0.0.1:2379,10.0.0.2:2379", ("10.0.0.1:2379", "10.0.0.2:2379")),
        ("10.0.0.1:2379,10.0.0.2:2379", ("10.0.0.1:2379", "10.0.0.2:2379")),  # as --etcd
    ],
)
def test_etcd_addresses(text: str, endpoints: tuple[str, ...]) -> None:
    parsed = parse_store(text)
    assert isinstance(parsed, EtcdConfig) and parsed.endpoints == endpoints
    assert store_address(parsed) == "etcd://" + ",".join(endpoints)
    # Settings besides the endpoints come from the EtcdConfig given.
    with_tls = parse_store(text, EtcdConfig(timeout_s=2.5))
    assert isinstance(with_tls, EtcdConfig) and with_tls.timeout_s == 2.5


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("", "no store given"),
        ("etcd://", "no store given"),
        ("rocksdb:", "needs the store's directory"),
        ("mysql://db:3306", "unknown store 'mysql'"),
        ("etcd://no-port", "HOST:PORT"),
    ],
)
def test_bad_addresses_say_what_is_understood(text: str, says: str) -> None:
    with pytest.raises(ValueError, match=says):
        parse_store(text)


def test_flags_name_the_flag_at_fault(tmp_path: Path) -> None:
    assert store_config(None) == parse_store("etcd://127.0.0.1:2379")  # the default
    assert store_config(None, "10.0.0.1:2379") == parse_store("10.0.0.1:2379")
    with pytest.raises(click.BadParameter, match="not both") as both:
        store_config("rocksdb:/x", "10.0.0.1:2379")
    assert both.value.param_hint == "--store"
    with pytest.raises(click.BadParameter, match="unknown store") as bad:
        store_config("nope://x")
    assert bad.value.param_hint == "--store"
    ca = tmp_path / "ca.pem"
    ca.write_text("x")
    with pytest.raises(click.BadParameter, match="applies to an etcd store") as tls:
        store_config("rocksdb:/x", None, str(ca))
    assert tls.value.param_hint == "--etcd-ca"
    with pytest.raises(click.BadParameter) as half:  # a certificate without its key
        store_config("etcd://10.0.0.1:2379", None, str(ca), str(ca))
    assert half.value.param_hint == "--etcd-cert"


async def test_open_store_opens_the_embedded_one_and_a_second_open_is_refused(
    tmp_path: Path,
) -> None:
    config = parse_store(f"rocksdb:{tmp_path / 'store'}")
    kv = await open_store(config)
    try:
        assert isinstance(kv, RocksKV)
        await kv.put(b"/k", b"v")
        # One process holds it (RocksDB's lock is per process: another open here is refused
        # the same way another process is).
        with pytest.raises(FailedPrecondition, match="held by one process at a time"):
            await open_store(config)
    finally:
        await kv.close()
    again = await open_store(config)
    try:
        got = await again.get(b"/k")
        assert got is not None and got.value == b"v"
    finally:
        await again.close()

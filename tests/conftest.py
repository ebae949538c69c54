"""Shared fixtures: a real etcd server per test session, a fresh key prefix per test."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from failed_stash import FAILED

from schedd.dev import EtcdProcess
from schedd.store import EtcdConfig, EtcdKV


@pytest.fixture(scope="session")
def etcd_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EtcdProcess]:
    """One real etcd process on free loopback ports for the whole session."""
    proc = EtcdProcess(tmp_path_factory.mktemp("etcd"), name="schedd-test")
    proc.start()
    yield proc
    proc.stop()


@pytest.fixture
def etcd_prefix() -> bytes:
    """A key prefix no other test uses, so tests sharing the server never see each other."""
    return f"/schedd-test/{uuid.uuid4().hex[:12]}/".encode()


@pytest.fixture
async def etcd(etcd_server: EtcdProcess) -> AsyncIterator[EtcdKV]:
    client = await EtcdKV.connect(EtcdConfig(endpoints=(etcd_server.endpoint,)))
    yield client
    await client.close()


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    d = tmp_path / "data"
    d.mkdir()
    return d


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> object:
    """Marks a test whose call failed (:mod:`failed_stash`), for fixtures that print logs."""
    rep = yield
    if rep.when == "call" and rep.failed:
        item.stash[FAILED] = True
    return rep

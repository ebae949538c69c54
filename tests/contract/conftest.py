"""The contract suite's fixture: every test runs once per store backend, on a fresh prefix."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from contract.backends import Backend
from schedd._clock import ManualClock
from schedd.dev import EtcdProcess
from schedd.store import EtcdConfig, EtcdKV, MemoryKV, RocksKV


@pytest.fixture(params=["memory", "rocksdb", "etcd"])
async def backend(
    request: pytest.FixtureRequest, etcd_prefix: bytes, tmp_path: Path
) -> AsyncIterator[Backend]:
    if request.param == "memory":
        clock = ManualClock(1_700_000_000_000)
        memory = MemoryKV(clock=clock)
        yield Backend("memory", memory, etcd_prefix, clock)
        await memory.close()
        return
    if request.param == "rocksdb":
        clock = ManualClock(1_700_000_000_000)
        rocks = await RocksKV.open(tmp_path / "store", clock=clock)
        yield Backend("rocksdb", rocks, etcd_prefix, clock)
        await rocks.close()
        return
    server: EtcdProcess = request.getfixturevalue("etcd_server")
    client = await EtcdKV.connect(EtcdConfig(endpoints=(server.endpoint,)))
    yield Backend("etcd", client, etcd_prefix)
    await client.close()

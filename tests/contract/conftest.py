"""The contract suite's fixture: every test runs once per store backend, on a fresh prefix."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from contract.backends import Backend
from schedd._clock import ManualClock
from schedd.dev import EtcdProcess
from schedd.store import EtcdConfig, EtcdKV, MemoryKV


@pytest.fixture(params=["memory", "etcd"])
async def backend(request: pytest.FixtureRequest, etcd_prefix: bytes) -> AsyncIterator[Backend]:
    if request.param == "memory":
        clock = ManualClock(1_700_000_000_000)
        memory = MemoryKV(clock=clock)
        yield Backend("memory", memory, etcd_prefix, clock)
        await memory.close()
        return
    server: EtcdProcess = request.getfixturevalue("etcd_server")
    client = await EtcdKV.connect(EtcdConfig(endpoints=(server.endpoint,)))
    yield Backend("etcd", client, etcd_prefix)
    await client.close()

"""The integration tests' shared fixtures: an empty harness on the session's etcd (``h``), or
on either store (``h_store``: etcd, or an embedded store in the test's directory)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from integration.cluster_harness import Harness, harness_on
from schedd.dev import EtcdProcess


@pytest.fixture
async def h(etcd_server: EtcdProcess, etcd_prefix: bytes, tmp_path: Path) -> AsyncIterator[Harness]:
    """A harness with no node or worker yet, closed (everything it started) after the test.

    Files that need one already running define their own ``h``.
    """
    harness = Harness(etcd_server.endpoint, etcd_prefix, tmp_path)
    try:
        yield harness
    finally:
        await harness.close()


@pytest.fixture(params=["etcd", "rocksdb"])
async def h_store(
    request: pytest.FixtureRequest, etcd_prefix: bytes, tmp_path: Path
) -> AsyncIterator[Harness]:
    """Like ``h``, once on etcd and once on an embedded store (one node at most there)."""
    harness = harness_on(request, str(request.param), etcd_prefix, tmp_path)
    try:
        yield harness
    finally:
        await harness.close()


@pytest.fixture
async def h_embedded(
    request: pytest.FixtureRequest, etcd_prefix: bytes, tmp_path: Path
) -> AsyncIterator[Harness]:
    """Like ``h`` on an embedded store: for tests that do not depend on the store (a node on
    it starts faster than on etcd)."""
    harness = harness_on(request, "rocksdb", etcd_prefix, tmp_path)
    try:
        yield harness
    finally:
        await harness.close()

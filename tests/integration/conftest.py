"""The integration tests' shared fixture: an empty harness on the session's etcd."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from integration.cluster_harness import Harness
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

"""The node reports to its metrics recorder: ownership changes and dead letters."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import pytest

from integration.cluster_harness import Harness, eventually, node_config
from schedd.node import Node
from schedd.obs import NoopRecorder

pytestmark = pytest.mark.timeout(60)


class Recording(NoopRecorder):
    __slots__ = ("calls", "owned")

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()
        self.owned = 0

    def partitions_owned(self, n: int) -> None:
        self.owned = n

    def ownership_changed(self) -> None:
        self.calls["ownership_changed"] += 1

    def dead_lettered(self) -> None:
        self.calls["dead_lettered"] += 1


async def test_the_recorder_sees_ownership_and_dead_letters(h: Harness) -> None:
    rec = Recording()
    node = Node(node_config(h.endpoint, h.prefix, h.root / "n"), recorder=rec)
    await node.start()
    h.nodes.append(node)
    await h.wait_all_owned(node)
    assert rec.owned == node.config.partitions
    assert rec.calls["ownership_changed"] == node.config.partitions
    await h.start_worker()
    client = await h.connect()
    await client.create_job("doomed", schedule="@after 1s", handler="fail", max_attempts=1)

    def dead() -> Any:
        return asyncio.sleep(0, result=rec.calls["dead_lettered"])

    await eventually(dead, lambda n: n == 1, what="one dead letter")

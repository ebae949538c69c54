"""What a node wrote to the store, in the cluster status: counted by the embedded store (keys
and write-ahead-log bytes, growing with each write), left to etcd's own metrics on etcd."""

from __future__ import annotations

import pytest

from schedd.v1 import job_pb2
from tests.integration.cluster_harness import Harness

pytestmark = pytest.mark.timeout(60)


async def test_the_cluster_status_says_what_a_node_wrote(h_store: Harness) -> None:
    await h_store.start_node()
    client = await h_store.connect()
    [before] = (await client.cluster_status()).nodes
    job = job_pb2.Job(
        name="w", schedule=job_pb2.Schedule(expr="@every 1h"),
        handler=job_pb2.HandlerTarget(name="echo"), payload=b"x" * 1000,
    )  # fmt: skip
    await client.create(job)
    [after] = (await client.cluster_status()).nodes
    if h_store.endpoint.startswith("rocksdb:"):
        assert before.store_writes_known and after.store_writes_known
        # The create writes the spec, cursor, due entry, name, tenant index and notice.
        assert after.store_keys_written - before.store_keys_written >= 5
        assert after.store_bytes_written - before.store_bytes_written > 1000
    else:
        assert not after.store_writes_known and after.store_keys_written == 0

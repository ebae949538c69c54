"""TriggerJob's idempotency key through a real node, on etcd and on the embedded store: a
repeat returns the same execution (live, then finished: the cluster-wide look-up) and runs
nothing more; another payload is ALREADY_EXISTS and a bad key INVALID_ARGUMENT, each naming
``idempotency_key``; another tenant's same key is its own; the key expires (swept from the
store, then the same key triggers anew). The key's lifetime is shortened to 3 s here."""

from __future__ import annotations

import pytest

from schedd._errors import AlreadyExists, InvalidArgument
from schedd.store import prefix_end
from schedd.v1 import execution_pb2
from tests.integration.cluster_harness import SUCCEEDED, Harness, eventually

pytestmark = pytest.mark.timeout(60)

TTL_MS = 3000


async def test_a_keyed_trigger_runs_once_until_its_key_expires(h_store: Harness) -> None:
    node = await h_store.start_node(trigger_key_ttl_ms=TTL_MS, trigger_key_sweep_interval_s=0.2)
    await h_store.wait_all_owned(node)
    await h_store.start_worker()
    client = await h_store.connect()
    spec = {"schedule": "0 0 1 1 *", "handler": "echo"}
    acme = (await client.create_job("nightly", tenant="acme", **spec)).job
    bolt = (await client.create_job("nightly", tenant="bolt", **spec)).job

    first = await client.trigger_job(acme.id, {"n": 1}, idempotency_key="order-42")
    again = await client.trigger_job(acme.id, {"n": 1}, idempotency_key="order-42")
    assert again.id == first.id  # from the live runs

    with pytest.raises(AlreadyExists, match="idempotency_key 'order-42'"):
        await client.trigger_job(acme.id, {"n": 2}, idempotency_key="order-42")
    with pytest.raises(InvalidArgument) as bad:
        await client.trigger_job(acme.id, {"n": 1}, idempotency_key="a/b")
    assert bad.value.field == "idempotency_key"
    other = await client.trigger_job(bolt.id, {"n": 1}, idempotency_key="order-42")
    assert other.id != first.id and other.tenant == "bolt"

    done = await eventually(
        lambda: client.get_execution(first.id),
        lambda ex: ex.state == SUCCEEDED,
        timeout=10,
        what="the triggered run to finish",
    )
    after = await client.trigger_job(acme.id, {"n": 1}, idempotency_key="order-42")
    assert (after.id, after.state) == (first.id, SUCCEEDED)  # from the node's history
    runs = await h_store.runs(acme.id)
    assert [ex.id for ex in runs if ex.trigger == execution_pb2.TRIGGER_MANUAL] == [done.id]

    # Expiry: the node's sweep deletes the keys once their lifetime is over...
    start = node.keys.trigger_idem_prefix()

    async def keys_left() -> int:
        kvs, _, _ = await node.kv.range(start, prefix_end(start))
        return len(kvs)

    assert await keys_left() == 2
    await eventually(keys_left, lambda n: n == 0, timeout=TTL_MS / 1000 + 5, what="the sweep")
    # ... and the same key then triggers a new run.
    fresh = await client.trigger_job(acme.id, {"n": 2}, idempotency_key="order-42")
    assert fresh.id != first.id
    assert await keys_left() == 1

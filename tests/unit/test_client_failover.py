"""The client's failover policy with fake endpoints, a fake clock and no sleeps: which calls
go to the next node, in which order, and when it gives up."""

from __future__ import annotations

import random
from collections.abc import Coroutine
from typing import Any

import grpc
import pytest
from test_client_servicer import Served, served

from schedd import Unavailable
from schedd.client import Client
from schedd.client._failover import Backoff, Rotation, call_with_failover, is_idempotent
from schedd.v1 import job_pb2, scheduler_pb2

__all__ = ["served"]

ENDPOINTS = ["a:1", "b:2", "c:3"]


class _Rpc(grpc.RpcError):
    def __init__(self, code: grpc.StatusCode, details: str = "") -> None:
        self._code = code
        self._details = details

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._details


class Fake:
    """Endpoints that are down (refuse to connect), fail after the send, or answer."""

    def __init__(
        self,
        down: set[int] = frozenset(),  # type: ignore[assignment]
        fail_after_send: dict[int, grpc.StatusCode] | None = None,
        connect_s: float = 0.0,
        hang: set[int] = frozenset(),  # type: ignore[assignment]
    ) -> None:
        self.now = 0.0
        self.down = set(down)
        self.fail_after_send = fail_after_send or {}
        self.connect_s = connect_s
        self.connects: list[int] = []
        self.sent: list[int] = []
        self.slept: list[float] = []
        self.timeouts: list[float] = []
        self.hang = set(hang)

    async def connect(self, i: int, timeout: float) -> bool:
        self.connects.append(i)
        if i in self.down:
            self.now += min(timeout, self.connect_s)
            return False
        return True

    async def send(self, i: int, timeout: float) -> str:
        self.sent.append(i)
        self.timeouts.append(timeout)
        if i in self.hang:
            self.now += timeout
            raise _Rpc(grpc.StatusCode.DEADLINE_EXCEEDED)
        if i in self.fail_after_send:
            raise _Rpc(self.fail_after_send[i], f"node {i} says\nno")
        return ENDPOINTS[i]

    async def sleep(self, s: float) -> None:
        self.slept.append(s)
        self.now += s

    def call(
        self, rotation: Rotation, idempotent: bool, timeout_s: float = 10.0
    ) -> Coroutine[Any, Any, str]:
        return call_with_failover(
            ENDPOINTS,
            rotation,
            idempotent=idempotent,
            connect=self.connect,
            send=self.send,
            timeout_s=timeout_s,
            connect_timeout_s=2.0,
            backoff=Backoff(rng=random.Random(7)),
            clock=lambda: self.now,
            sleep=self.sleep,
        )


def test_rotation_starts_at_the_last_good_endpoint() -> None:
    r = Rotation(3)
    assert r.order() == [0, 1, 2]
    r.succeeded(1)
    assert r.order() == [1, 2, 0]
    with pytest.raises(ValueError):
        Rotation(0)


def test_backoff_is_jittered_and_capped() -> None:
    b = Backoff(base_s=0.1, cap_s=0.3, rng=random.Random(1))
    delays = [b.delay(n) for n in (1, 2, 3, 4, 5) for _ in range(50)]
    assert all(0 <= d <= 0.3 for d in delays)
    assert len(set(delays)) > 10  # jittered, not a fixed step
    assert max(b.delay(1) for _ in range(50)) <= 0.1


def test_which_calls_are_idempotent() -> None:
    keyed = job_pb2.Job(idempotency_key="k")
    plain = job_pb2.Job(id="explicit-id")
    assert is_idempotent("GetJob", scheduler_pb2.GetJobRequest(id="j"))
    assert is_idempotent("GetClusterStatus", scheduler_pb2.GetClusterStatusRequest())
    assert is_idempotent("ListWorkers", None)  # a read added later is covered by its name
    assert is_idempotent("CreateJob", scheduler_pb2.CreateJobRequest(job=keyed))
    assert not is_idempotent("CreateJob", scheduler_pb2.CreateJobRequest(job=plain))
    both = scheduler_pb2.BatchCreateJobsRequest(jobs=[keyed, keyed])
    mixed = scheduler_pb2.BatchCreateJobsRequest(jobs=[keyed, plain])
    assert is_idempotent("BatchCreateJobs", both)
    assert not is_idempotent("BatchCreateJobs", mixed)
    assert not is_idempotent("BatchCreateJobs", scheduler_pb2.BatchCreateJobsRequest())
    trigger = scheduler_pb2.TriggerJobRequest(id="j", idempotency_key="k")
    assert is_idempotent("TriggerJob", trigger)
    assert not is_idempotent("TriggerJob", scheduler_pb2.TriggerJobRequest(id="j"))
    for method in ("UpdateJob", "DeleteJob", "PauseJob", "TriggerJob", "RedriveDeadLetters"):
        assert not is_idempotent(method, None), method


async def test_a_read_skips_a_down_endpoint_and_remembers_the_good_one() -> None:
    fake, rotation = Fake(down={0}), Rotation(3)
    assert await fake.call(rotation, idempotent=True) == "b:2"
    assert fake.connects == [0, 1] and fake.sent == [1]
    assert await fake.call(rotation, idempotent=True) == "b:2"
    assert fake.connects == [0, 1, 1]  # the second call starts at b, the dead a is not tried


async def test_a_read_that_failed_after_sending_goes_to_the_next_node() -> None:
    for code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
        fake = Fake(fail_after_send={0: code})
        assert await fake.call(Rotation(3), idempotent=True) == "b:2"
        assert fake.sent == [0, 1]


async def test_what_the_nodes_said_is_in_the_final_error() -> None:
    fake = Fake(fail_after_send=dict.fromkeys(range(3), grpc.StatusCode.UNAVAILABLE))
    with pytest.raises(Unavailable) as info:
        await fake.call(Rotation(3), idempotent=True)
    assert "b:2 (UNAVAILABLE: node 1 says no)" in str(info.value)
    assert len(fake.sent) == 9  # three rounds


async def test_a_write_that_may_have_been_sent_is_not_sent_again() -> None:
    fake = Fake(fail_after_send={0: grpc.StatusCode.UNAVAILABLE})
    with pytest.raises(grpc.RpcError):
        await fake.call(Rotation(3), idempotent=False)
    assert fake.sent == [0]


async def test_a_write_goes_to_the_next_node_when_the_first_never_connected() -> None:
    fake, rotation = Fake(down={0, 1}), Rotation(3)
    assert await fake.call(rotation, idempotent=False) == "c:3"
    assert fake.sent == [2] and rotation.preferred == 2


async def test_an_answer_from_a_node_is_final_even_for_a_read() -> None:
    fake = Fake(fail_after_send={0: grpc.StatusCode.NOT_FOUND})
    with pytest.raises(grpc.RpcError) as info:
        await fake.call(Rotation(3), idempotent=True)
    assert info.value.code() == grpc.StatusCode.NOT_FOUND  # type: ignore[attr-defined]
    assert fake.sent == [0]


async def test_every_endpoint_down_gives_up_after_three_rounds_naming_each() -> None:
    fake = Fake(down={0, 1, 2})
    with pytest.raises(Unavailable) as info:
        await fake.call(Rotation(3), idempotent=True)
    assert fake.connects == [0, 1, 2] * 3 and not fake.sent
    assert len(fake.slept) == 2 and all(0 <= s <= 0.5 for s in fake.slept)
    message = str(info.value)
    assert all(f"{e} (not reachable)" in message for e in ENDPOINTS)
    assert "\n" not in message


async def test_the_deadline_bounds_every_try() -> None:
    # Each dead endpoint takes its whole connect timeout (2 s) to fail: with 3 s in all the
    # call gives up after two of them, not after three rounds.
    fake = Fake(down={0, 1, 2}, connect_s=5.0)
    with pytest.raises(Unavailable):
        await fake.call(Rotation(3), idempotent=True, timeout_s=3.0)
    assert fake.connects == [0, 1] and fake.now == pytest.approx(3.0)


async def test_a_read_leaves_time_for_the_next_node_when_one_hangs() -> None:
    # a accepts the connection but never answers (a stopped process): half the time, then b.
    fake = Fake(hang={0})
    assert await fake.call(Rotation(3), idempotent=True, timeout_s=10.0) == "b:2"
    assert fake.timeouts == [5.0, 2.5]


async def test_a_write_gets_the_whole_deadline() -> None:
    fake = Fake(hang={0})
    with pytest.raises(grpc.RpcError):
        await fake.call(Rotation(3), idempotent=False, timeout_s=10.0)
    assert fake.timeouts == [10.0] and fake.sent == [0]


def test_a_real_client_given_a_dead_endpoint_first_reaches_the_live_one(served: Served) -> None:
    # Real gRPC on loopback: port 1 refuses; reads and writes both get through to the next.
    with Client(["127.0.0.1:1", served.endpoint], timeout_s=3) as client:
        assert client.endpoints == ["127.0.0.1:1", served.endpoint]
        assert client.get_job("j-1").id == "j-1"
        assert client.pause_job("j-1").id == "j-1"
    assert [c.method for c in served.servicer.calls][-2:] == ["GetJob", "PauseJob"]

"""The fan-out on loopback: this node answers directly, a peer over a real grpc.aio server;
a refused connection, a wildcard address and a hung peer come back as missing nodes with
their reasons, in time, while the others' parts are kept."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest

from schedd.node._fanout import Fanout
from schedd.v1 import peer_pb2, peer_pb2_grpc, scheduler_pb2


class _Peer(peer_pb2_grpc.PeerServicer):
    def __init__(self, node_id: str, delay_s: float = 0.0) -> None:
        self.node_id = node_id
        self.delay_s = delay_s

    async def GetLocalStatus(self, request: Any, context: Any) -> Any:
        await asyncio.sleep(self.delay_s)
        return peer_pb2.LocalStatus(node=scheduler_pb2.NodeStatus(node_id=self.node_id))


async def _serve(servicer: _Peer) -> tuple[Any, str]:
    server = grpc.aio.server()
    peer_pb2_grpc.add_PeerServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    return server, f"127.0.0.1:{port}"


@pytest.fixture
async def peers() -> AsyncIterator[dict[str, str]]:
    ok, ok_addr = await _serve(_Peer("ok"))
    slow, slow_addr = await _serve(_Peer("slow", delay_s=5))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        refused = f"127.0.0.1:{s.getsockname()[1]}"  # closed again: nothing listens there
    yield {
        "me": "127.0.0.1:9",
        "ok": ok_addr,
        "slow": slow_addr,
        "down": refused,
        "w": "0.0.0.0:7070",
    }
    await ok.stop(0)
    await slow.stop(0)


async def test_parts_from_everyone_who_answers_and_reasons_for_the_rest(
    peers: dict[str, str],
) -> None:
    fanout = Fanout("me", lambda: peers, timeout_s=0.3)

    async def local() -> str:
        return "mine"

    async def remote(stub: peer_pb2_grpc.PeerAsyncStub, timeout: float) -> str:
        ans = await stub.GetLocalStatus(scheduler_pb2.GetClusterStatusRequest(), timeout=timeout)
        return ans.node.node_id

    loop = asyncio.get_running_loop()
    started = loop.time()
    try:
        parts, missing = await fanout.ask(local, remote)
    finally:
        await fanout.close()
    assert loop.time() - started < 2.0  # in parallel, each bounded by its deadline
    assert parts == {"me": "mine", "ok": "ok"}
    reasons = {m.node_id: m.reason for m in missing}
    assert sorted(reasons) == ["down", "slow", "w"]
    assert reasons["slow"] == "no answer within 300 ms"
    assert reasons["down"].startswith("UNAVAILABLE")
    assert "--advertise" in reasons["w"]
    assert {m.node_id: m.address for m in missing}["down"] == peers["down"]


async def test_alone_it_answers_itself_without_dialling() -> None:
    fanout = Fanout("me", lambda: {}, timeout_s=0.3)

    async def local() -> int:
        return 7

    async def remote(stub: peer_pb2_grpc.PeerAsyncStub, timeout: float) -> int:
        raise AssertionError("no peer to ask")

    assert await fanout.ask(local, remote) == ({"me": 7}, [])

"""Worker discovery without a cluster: the membership diffing with a fake clock, the rounds over
a fake membership source (called directly: no sleeps), and the reconnect backoff."""

from __future__ import annotations

import random

import grpc
import pytest

from schedd.worker import WorkerConfig
from schedd.worker._cli import parse_connect
from schedd.worker._connection import reconnect_delay
from schedd.worker._discovery import Discovery, Members, NodeDirectory, Plan


def test_new_nodes_are_connected_and_absent_ones_forgotten_after_the_grace() -> None:
    d = NodeDirectory(forget_after_s=30)
    conns: dict[str, str | None] = {"a:1": "A"}
    assert d.plan({"A": "a:1", "B": "b:2"}, conns, now=0) == Plan(connect=["b:2"])
    conns["b:2"] = "B"
    assert d.plan({"A": "a:1", "B": "b:2"}, conns, now=5) == Plan()
    # B leaves at t=10: kept through the grace (counted from t=5, its last answer) ...
    assert d.plan({"A": "a:1"}, conns, now=10) == Plan()
    assert d.plan({"A": "a:1"}, conns, now=34.9) == Plan()
    # ... then forgotten, and forgotten again each round until the worker closes it.
    assert d.plan({"A": "a:1"}, conns, now=35) == Plan(forget=["b:2"])
    assert d.plan({"A": "a:1"}, conns, now=36) == Plan(forget=["b:2"])
    del conns["b:2"]
    assert d.plan({"A": "a:1"}, conns, now=37) == Plan()
    # B back on another port: a new connection, with a fresh grace for the old address.
    assert d.plan({"A": "a:1", "B": "b:9"}, conns, now=40) == Plan(connect=["b:9"])


def test_a_node_that_comes_back_within_the_grace_is_kept() -> None:
    d = NodeDirectory(forget_after_s=30)
    conns: dict[str, str | None] = {"a:1": "A", "b:2": "B"}
    d.plan({"A": "a:1", "B": "b:2"}, conns, now=0)
    d.plan({"A": "a:1"}, conns, now=20)
    assert d.plan({"A": "a:1", "B": "b:2"}, conns, now=25) == Plan()
    assert d.plan({"A": "a:1"}, conns, now=50) == Plan()  # last present at 25


def test_a_given_alias_of_a_live_node_is_not_doubled_nor_forgotten() -> None:
    # Given "localhost:1"; node A advertises "a:1". Once welcomed by A, the alias covers A.
    d = NodeDirectory(forget_after_s=30)
    conns: dict[str, str | None] = {"localhost:1": "A"}
    assert d.plan({"A": "a:1", "B": "b:2"}, conns, now=0) == Plan(connect=["b:2"])
    conns["b:2"] = "B"
    assert d.plan({"A": "a:1", "B": "b:2"}, conns, now=100) == Plan()


def test_an_alias_beside_a_connection_to_the_real_address_goes_after_the_grace() -> None:
    # Before its Welcome the alias could not be matched, so "a:1" was opened too.
    d = NodeDirectory(forget_after_s=30)
    conns: dict[str, str | None] = {"localhost:1": None}
    assert d.plan({"A": "a:1"}, conns, now=0) == Plan(connect=["a:1"])
    conns = {"localhost:1": "A", "a:1": "A"}
    assert d.plan({"A": "a:1"}, conns, now=10) == Plan()
    assert d.plan({"A": "a:1"}, conns, now=30) == Plan(forget=["localhost:1"])


def test_a_given_address_that_is_no_member_is_forgotten_after_the_grace() -> None:
    d = NodeDirectory(forget_after_s=5)
    conns: dict[str, str | None] = {"old:1": None, "a:1": "A"}
    assert d.plan({"A": "a:1"}, conns, now=100) == Plan()
    assert d.plan({"A": "a:1"}, conns, now=105) == Plan(forget=["old:1"])


def test_a_wildcard_address_is_never_dialled_but_counts_as_present() -> None:
    d = NodeDirectory(forget_after_s=5)
    # Given 127.0.0.1:1; the node listens on 0.0.0.0:1 without --advertise.
    conns: dict[str, str | None] = {"127.0.0.1:1": "A"}
    assert d.plan({"A": "0.0.0.0:1"}, conns, now=0) == Plan()
    assert d.plan({"A": "0.0.0.0:1"}, conns, now=100) == Plan()
    plan = d.plan({"A": "0.0.0.0:1", "B": "[::]:2"}, conns, now=101)
    assert plan == Plan(unusable=["[::]:2"])


class FakeCluster:
    """Nodes that answer membership queries (or not), and the worker's connections."""

    def __init__(self, members: dict[str, str], up: set[str]) -> None:
        self.members = members
        self.up = up
        self.asked: list[str] = []
        self.kept: set[str] = set()
        self.conns: dict[str, str | None] = {}
        self.running: dict[str, int] = {}
        self.revived: list[str] = []
        self.now = 0.0

    async def __call__(self, address: str, timeout: float) -> Members:
        self.asked.append(address)
        if address not in self.up:
            raise _Refused()
        return dict(self.members)

    async def keep_only(self, addresses: set[str]) -> None:
        self.kept = addresses

    def connect(self, address: str) -> None:
        node = {a: n for n, a in self.members.items()}.get(address)
        self.conns[address] = node

    async def forget(self, endpoint: str) -> bool:
        if self.running.get(endpoint):
            return False
        del self.conns[endpoint]
        return True

    def discovery(self, seeds: list[str], forget_after_s: float = 30) -> Discovery:
        for s in seeds:
            self.connect(s)
        return Discovery(
            seeds,
            NodeDirectory(forget_after_s),
            interval_s=2,
            query=self,
            connections=lambda: dict(self.conns),
            connect=self.connect,
            forget=self.forget,
            clock=lambda: self.now,
            revive=self.revived.append,
        )


class _Refused(grpc.RpcError):
    pass


async def test_rounds_connect_to_joiners_and_keep_a_busy_leaver() -> None:
    c = FakeCluster({"A": "a:1", "B": "b:2"}, up={"a:1", "b:2"})
    disc = c.discovery(["a:1"])
    await disc.round()
    assert sorted(c.conns) == ["a:1", "b:2"]
    c.members["C"] = "c:3"  # C joins later
    c.up.add("c:3")
    c.now = 2
    await disc.round()
    assert sorted(c.conns) == ["a:1", "b:2", "c:3"]
    # C leaves while an execution it dispatched runs here: kept, then closed once idle.
    del c.members["C"]
    c.running["c:3"] = 1
    c.now = 40
    assert (await disc.round()).forget == ["c:3"]
    assert "c:3" in c.conns
    c.running["c:3"] = 0
    c.now = 42
    await disc.round()
    assert sorted(c.conns) == ["a:1", "b:2"]
    assert c.kept == {"a:1", "b:2"}


async def test_asks_the_last_good_node_first_then_the_others() -> None:
    c = FakeCluster({"A": "a:1", "B": "b:2"}, up={"a:1", "b:2"})
    disc = c.discovery(["a:1"])
    await disc.round()
    assert c.asked == ["a:1"]
    c.up.discard("a:1")  # the given node dies: the one it named answers instead
    await disc.round()
    assert c.asked == ["a:1", "a:1", "b:2"]
    await disc.round()
    assert c.asked[-1] == "b:2" and disc.candidates()[0] == "b:2"


async def test_a_round_without_answers_changes_nothing() -> None:
    c = FakeCluster({"A": "a:1", "B": "b:2"}, up={"a:1", "b:2"})
    disc = c.discovery(["a:1"], forget_after_s=1)
    await disc.round()
    c.up.clear()
    c.now = 100  # long past the grace: still nothing forgotten without an answer
    assert await disc.round() == Plan()
    assert sorted(c.conns) == ["a:1", "b:2"] and disc.answered == 1


async def test_connections_to_live_addresses_are_revived_every_round() -> None:
    """A stream down in its backoff to a node listed live (restarted on its address)
    reconnects now; one just planned, or to an address no longer live, is left alone."""
    c = FakeCluster({"A": "a:1", "B": "b:2"}, up={"a:1", "b:2"})
    disc = c.discovery(["a:1"])
    await disc.round()
    assert c.revived == ["a:1"]  # b:2 was just connected
    del c.members["B"]
    await disc.round()
    assert c.revived == ["a:1", "a:1"]


async def test_a_node_restarted_on_another_address_is_connected_there() -> None:
    """The old endpoint's stream is down (no node id): it does not cover the node's new
    address, and it is forgotten after the grace."""
    c = FakeCluster({"A": "a:1", "B": "b:2"}, up={"a:1", "b:2"})
    disc = c.discovery(["a:1", "b:2"])
    await disc.round()
    c.members["B"] = "b:3"  # B restarted on another port
    c.up.add("b:3")
    c.conns["b:2"] = None  # its old stream is down, reconnecting
    c.now = 2
    assert (await disc.round()).connect == ["b:3"]
    c.now = 40
    await disc.round()
    assert sorted(c.conns) == ["a:1", "b:3"]


def test_config_validates_discovery_settings() -> None:
    assert WorkerConfig(("a:1",)).discover is True
    with pytest.raises(ValueError, match="discovery_interval_s"):
        WorkerConfig(("a:1",), discovery_interval_s=0)
    with pytest.raises(ValueError, match="forget_node_after_s"):
        WorkerConfig(("a:1",), forget_node_after_s=-1)


def test_reconnect_delays_are_jittered_capped_and_never_overflow() -> None:
    rng = random.Random(3)
    first = [reconnect_delay(0, 0.1, 5.0, rng) for _ in range(100)]
    assert all(0 <= d <= 0.1 for d in first) and len(set(first)) == 100
    late = [reconnect_delay(n, 0.1, 5.0, rng) for n in (10, 1_100, 10**6)]
    assert all(0 <= d <= 5.0 for d in late)


def test_connect_flags_repeat_and_split_on_commas() -> None:
    assert parse_connect(["a:1,b:2", " b:2 ", "c:3,"]) == ["a:1", "b:2", "c:3"]
    assert parse_connect("a:1") == ["a:1"]

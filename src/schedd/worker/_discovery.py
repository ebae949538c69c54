"""How a worker finds every node: ask any node it knows for the live members, connect to the
new ones, forget the ones gone for long.

Each node dispatches only its own partitions, so a worker that misses a node misses its jobs.
Given one address (or a few), the worker asks the nodes' public ``GetClusterStatus`` every
``discovery_interval_s`` for the live nodes and their addresses, and:

- opens a stream to every live node it has none to (including nodes that join later);
- closes the stream to an address that has been out of the membership for
  ``forget_node_after_s`` (a node that left, or restarted on another port), unless that stream
  still carries running executions: their results must go back on it. It is asked again at
  the next round.

A round in which no node answers changes nothing: absence is only counted from answers.

The decisions are :class:`NodeDirectory` (pure, the clock passed in); :class:`Discovery` runs
the rounds; :class:`StatusQuery` asks the nodes over gRPC.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import grpc
import grpc.aio

from schedd._tls import TlsFiles
from schedd.v1 import scheduler_pb2, scheduler_pb2_grpc

log = logging.getLogger(__name__)

#: Live nodes as one answer gives them: node id -> address (``host:port``).
Members = Mapping[str, str]


@dataclass(frozen=True)
class Plan:
    """What one membership answer asks the worker to do."""

    connect: list[str] = field(default_factory=list)
    forget: list[str] = field(default_factory=list)
    #: Live nodes with no stream whose address cannot be dialled from elsewhere (a wildcard
    #: listen address such as ``0.0.0.0:7070``: the node needs ``--advertise``).
    unusable: list[str] = field(default_factory=list)


class NodeDirectory:
    """Compares membership answers with the worker's connections.

    A connection is known by its endpoint and, once welcomed, by the id of the node that
    answered on it. A live node counts as *covered* when a connection has its address, or was
    welcomed by it under another name (an address the worker was given, such as a host name
    where the node advertises its IP): no second stream is opened then. A connection counts as
    *present* when its endpoint is a live address, or its node is live and has no connection
    of its own address. An endpoint not present in any answer for ``forget_after_s`` (counted
    from the last answer it was present in, or from when the directory first saw it) is to be
    forgotten.

    Example (``forget_after_s=30``): given ``a:1`` only, at t=0 the answer is ``{A: a:1,
    B: b:2}``: plan connect ``[b:2]``. At t=10 the answer is ``{A: a:1}``: nothing to do. At
    t=40 the same answer: forget ``[b:2]`` (last present at t=0).
    """

    def __init__(self, forget_after_s: float) -> None:
        self.forget_after_s = forget_after_s
        self._last_present: dict[str, float] = {}

    def plan(self, live: Members, conns: Mapping[str, str | None], now: float) -> Plan:
        """What to do after the answer ``live``, given the connections ``conns`` (endpoint ->
        the node id it was welcomed by, or None before a Welcome), at ``now`` (seconds)."""
        addresses = {a for a in live.values() if a}
        welcomed = {nid for nid in conns.values() if nid}
        missing = sorted(
            addr for nid, addr in live.items() if addr and addr not in conns and nid not in welcomed
        )
        connect = [a for a in missing if dialable(a)]
        forget: list[str] = []
        for endpoint, nid in conns.items():
            alias_of_live = nid is not None and nid in live and live[nid] not in conns
            if endpoint in addresses or alias_of_live:
                self._last_present[endpoint] = now
                continue
            since = self._last_present.setdefault(endpoint, now)
            if now - since >= self.forget_after_s:
                forget.append(endpoint)
        for endpoint in list(self._last_present):
            if endpoint not in conns:  # closed elsewhere (or forgotten): start afresh if back
                del self._last_present[endpoint]
        for endpoint in connect:  # present now, in the answer that made it
            self._last_present[endpoint] = now
        return Plan(connect, sorted(forget), [a for a in missing if not dialable(a)])


def dialable(address: str) -> bool:
    """False for a wildcard host (``0.0.0.0``, ``::``): it names every interface of the node,
    and dialled from the worker it would reach the worker's own host."""
    host = address.rpartition(":")[0].strip("[]")
    return host not in ("", "0.0.0.0", "::")


class MembershipSource(Protocol):
    """Where :class:`Discovery` gets answers (:class:`StatusQuery`, or a fake in tests)."""

    async def __call__(self, address: str, timeout: float) -> Members:
        """The live members as the node at ``address`` sees them (raises when it does not
        answer: ``grpc.RpcError``, ``OSError`` or ``TimeoutError``)."""
        ...

    async def keep_only(self, addresses: set[str]) -> None:
        """Release what is kept for addresses no longer asked."""


class StatusQuery:
    """Asks one node for the live members (``GetClusterStatus``), keeping a channel per
    address it asked (closed once the address is no longer a candidate)."""

    def __init__(
        self,
        options: Sequence[tuple[str, object]] = (),
        tls: TlsFiles | None = None,
        metadata: Sequence[tuple[str, str]] = (),
    ) -> None:
        self._options = list(options)
        self._metadata = tuple(metadata) or None
        self._credentials: grpc.ChannelCredentials | None = None
        if tls is not None:
            self._credentials = tls.channel_credentials()
            self._options += tls.channel_options()
        self._channels: dict[str, grpc.aio.Channel] = {}

    async def __call__(self, address: str, timeout: float) -> dict[str, str]:
        channel = self._channels.get(address)
        if channel is None:
            if self._credentials is None:
                channel = grpc.aio.insecure_channel(address, options=self._options)
            else:
                channel = grpc.aio.secure_channel(address, self._credentials, self._options)
            self._channels[address] = channel
        stub = scheduler_pb2_grpc.SchedulerStub(channel)
        # local_only: the node's own membership view is all discovery needs; no fan-out.
        status = await stub.GetClusterStatus(
            scheduler_pb2.GetClusterStatusRequest(local_only=True),
            timeout=timeout,
            metadata=self._metadata,
        )
        return {n.node_id: n.address for n in status.nodes if n.address}

    async def keep_only(self, addresses: set[str]) -> None:
        """Close the channels of addresses no longer asked."""
        for address in [a for a in self._channels if a not in addresses]:
            await self._channels.pop(address).close()

    async def close(self) -> None:
        await self.keep_only(set())


class Discovery:
    """Runs a membership round every ``interval_s`` until cancelled.

    Addresses are asked in turn until one answers: the one that answered last, then the
    given ones, then the live addresses of the last answer. The worker is reached through
    three callables, so the rounds are tested without it.
    """

    def __init__(
        self,
        seeds: Sequence[str],
        directory: NodeDirectory,
        *,
        interval_s: float,
        query: MembershipSource,
        connections: Callable[[], Mapping[str, str | None]],
        connect: Callable[[str], None],
        forget: Callable[[str], Awaitable[bool]],
        clock: Callable[[], float],
        revive: Callable[[str], None] = lambda endpoint: None,
    ) -> None:
        """Args:
        seeds: The addresses the worker was given.
        directory: The diffing and its memory.
        interval_s: Time between rounds, and the deadline of one query.
        query: Asks one node for the live members.
        connections: The worker's connections (endpoint -> the node id that welcomed its
            open stream, or None while it has none).
        connect: Open a connection to an address.
        forget: Close the connection to an endpoint; False when it was kept (still has
            running executions).
        clock: Monotonic seconds.
        revive: Called for each connection whose endpoint is a live address: a stream that
            is down reconnects at once instead of after its backoff (a node restarted on
            the same address).
        """
        self.seeds = list(dict.fromkeys(seeds))
        self.directory = directory
        self.interval_s = interval_s
        self._query = query
        self._connections = connections
        self._connect = connect
        self._forget = forget
        self._clock = clock
        self._revive = revive
        self._last_good: str | None = None
        self._known: list[str] = []
        self._warned: set[str] = set()
        #: Rounds that got an answer, and the last members answered (for tests and logs).
        self.answered = 0
        self.members: dict[str, str] = {}

    def candidates(self) -> list[str]:
        """The addresses to ask, in order (see the class docstring)."""
        first = [self._last_good] if self._last_good else []
        return list(dict.fromkeys([*first, *self.seeds, *self._known]))

    async def ask(self) -> Members | None:
        """The members as the first node that answers sees them (None: none answered)."""
        for address in self.candidates():
            try:
                live = await self._query(address, self.interval_s)
            except (grpc.RpcError, OSError, TimeoutError) as exc:
                log.debug("membership query to %s failed: %r", address, exc)
                continue
            self._last_good = address
            return live
        return None

    async def round(self) -> Plan:
        """Ask, then connect and forget as the answer says; returns what it planned."""
        live = await self.ask()
        if live is None:
            log.debug("no node answered a membership query (asked %s)", self.candidates())
            return Plan()
        self.answered += 1
        self.members = dict(live)
        self._known = sorted(a for a in live.values() if a and dialable(a))
        await self._query.keep_only(set(self.candidates()))
        plan = self.directory.plan(live, self._connections(), self._clock())
        for address in plan.unusable:
            if address not in self._warned:
                self._warned.add(address)
                log.warning(
                    "node at %s advertises a wildcard address: not connecting (start it with"
                    " --advertise HOST:PORT)",
                    address,
                )
        for address in plan.connect:
            log.info("discovered node at %s: connecting", address)
            self._connect(address)
        planned = set(plan.connect)
        for endpoint in self._connections():
            if endpoint in self._known and endpoint not in planned:
                self._revive(endpoint)
        for endpoint in plan.forget:
            if await self._forget(endpoint):
                log.info("node at %s left the cluster: connection closed", endpoint)
            else:
                log.info("node at %s left the cluster: kept while executions run", endpoint)
        return plan

    async def run(self) -> None:
        """Rounds until cancelled; a round that fails unexpectedly is logged, not fatal."""
        while True:
            await asyncio.sleep(self.interval_s)
            try:
                await self.round()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("membership round failed; trying again in %.1f s", self.interval_s)

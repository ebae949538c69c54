"""Membership: each node's record under ``nodes/``, the live set, and clock skew."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from schedd._clock import Clock
from schedd._errors import Unavailable
from schedd.coord._bounded import within
from schedd.coord._mirror import PrefixMirror
from schedd.coord._session import Session
from schedd.store import KV, Keys, KeyValue

log = logging.getLogger(__name__)

#: Skew samples kept per peer (see ``Membership._sample``).
_KEEP_SAMPLES = 3

Listener = Callable[[], None]


@dataclass
class NodeInfo:
    """What a node publishes at ``nodes/{node_id}`` (JSON, attached to its session lease).

    Attributes:
        node_id: unique, stable id of the node.
        address: ``host:port`` its gRPC API listens on.
        version: software version.
        started_ms: wall time the node started (its own clock).
        clock_ms: its wall clock when the record was last written; peers compare it with
            their own clocks on receipt to estimate skew.
        eligible: False while the node refuses to own partitions (clock skew, or joining
            and its workers not connected yet); peers leave it out when sharing partitions out.
        workers: ids of the workers streaming to it (as of the last rewrite): a joining node
            waits for those before it takes a share (see PartitionOwnership).
    """

    node_id: str
    address: str
    version: str
    started_ms: int
    clock_ms: int
    eligible: bool = True
    workers: list[str] = dataclasses.field(default_factory=list)

    def to_json(self) -> bytes:
        return json.dumps(dataclasses.asdict(self), sort_keys=True).encode()

    @classmethod
    def from_json(cls, raw: bytes) -> NodeInfo:
        """Parses a record, ignoring unknown fields. Raises ValueError when malformed."""
        try:
            data = json.loads(raw)
            return cls(
                node_id=str(data["node_id"]),
                address=str(data["address"]),
                version=str(data["version"]),
                started_ms=int(data["started_ms"]),
                clock_ms=int(data["clock_ms"]),
                eligible=bool(data.get("eligible", True)),
                workers=[str(w) for w in data.get("workers", [])],
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"not a node record: {raw!r}") from exc


class Membership:
    """Registers this node and keeps the live set current.

    :meth:`start` loads the live set, then writes ``nodes/{id}`` under the session lease
    (with ``eligible=False`` when peers exist: a joining node is unverified until its clock
    was compared; :class:`PartitionOwnership` publishes it eligible then), then rewrites it every
    ``refresh_s`` with a fresh ``clock_ms``. A mirror of ``nodes/`` (list + watch, re-list
    on compaction) backs :meth:`live_nodes`. Nodes leave the set when their lease ends.

    Change notification: :meth:`add_listener` registers a plain callback, called
    synchronously (on the event loop) after every change of the live set or of a record;
    :attr:`changed` is an :class:`asyncio.Event` set on every change, for a single consumer
    that clears it before re-reading.

    Clock skew: on every peer record *received by watch* this node samples
    ``own_now - peer.clock_ms`` (so delivery latency counts against the peer; a few ms).
    :meth:`clock_skew_ms` is this node's offset from the median clock of all live nodes,
    itself included at 0, once every live peer was sampled. With an even count the middle
    value closer to 0 is taken, so with two nodes neither can be blamed (a warning is logged
    when they disagree by over a second).

    Args:
        kv: the store.
        keys: the key layout.
        session: the lease the node record is attached to; must be started.
        info: this node's record; ``clock_ms`` and ``eligible`` are maintained here.
        clock: wall clock used for ``clock_ms`` and skew samples.
        refresh_s: how often the record (and so its clock reading) is rewritten.
        workers: the ids of the workers streaming to this node now, published in the record.
    """

    def __init__(
        self,
        kv: KV,
        keys: Keys,
        session: Session,
        info: NodeInfo,
        *,
        clock: Clock,
        refresh_s: float = 2.0,
        workers: Callable[[], Iterable[str]] | None = None,
    ) -> None:
        self._kv = kv
        self._keys = keys
        self._session = session
        self.info = info
        self._clock = clock
        self.refresh_s = refresh_s
        self.local_workers: Callable[[], Iterable[str]] = workers or (lambda: ())
        self._mirror = PrefixMirror(kv, keys.nodes_prefix(), clock=clock)
        self._nodes: dict[str, NodeInfo] = {}
        self._samples: dict[str, int] = {}  # peer id -> own_now - peer clock_ms
        self._recent: dict[str, list[int]] = {}  # peer id -> its last _KEEP_SAMPLES samples
        self._revs: dict[str, int] = {}  # peer id -> mod revision of the record last seen
        self._warned_pair = False
        self._listeners: list[Listener] = []
        self.changed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    @property
    def node_id(self) -> str:
        return self.info.node_id

    def add_listener(self, listener: Listener) -> Callable[[], None]:
        """Calls ``listener()`` after every membership change; returns its remover."""
        self._listeners.append(listener)
        return lambda: self._listeners.remove(listener)

    async def start(self) -> None:
        """Publishes the node record and loads the live set.

        Raises:
            Unavailable: etcd cannot be reached.
        """
        self._mirror.add_listener(self._on_mirror)
        await self._mirror.start()
        if set(self._nodes) - {self.node_id}:
            # Unverified until its clock was compared with the peers' (PartitionOwnership
            # flips it), so peers do not shrink their share for a node that may not qualify.
            self.info.eligible = False
        await self._publish()
        self._task = asyncio.create_task(self._refresh_loop(), name=f"membership-{self.node_id}")

    async def stop(self, graceful: bool = True, timeout: float | None = None) -> None:
        """Stops refreshing; graceful: deletes the record too, waiting at most ``timeout``
        seconds on the clock (otherwise the session lease removes it when it ends)."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        await self._mirror.stop()
        if graceful and not self._session.done.is_set():
            with contextlib.suppress(Unavailable):
                delete = self._kv.delete(self._keys.node_key(self.node_id))
                await within(self._clock, delete, timeout)

    def live_nodes(self) -> dict[str, NodeInfo]:
        """Node id -> record of every node whose session is alive (as last seen)."""
        return dict(self._nodes)

    def eligible_nodes(self) -> set[str]:
        """Ids of live nodes willing to own partitions; always includes this node if eligible."""
        ids = {n for n, i in self._nodes.items() if i.eligible}
        if self.info.eligible:
            ids.add(self.node_id)
        return ids

    def peer_workers(self) -> set[str]:
        """The workers the other live nodes said they have streams from."""
        return {w for n, i in self._nodes.items() if n != self.node_id for w in i.workers}

    async def set_eligible(self, eligible: bool) -> None:
        """Publishes whether this node is willing to own partitions (immediately)."""
        if self.info.eligible == eligible:
            return
        self.info.eligible = eligible
        await self._publish()

    def peer_offsets_ms(self) -> dict[str, int]:
        """Peer id -> latest sample of ``own_now - peer_clock`` (positive: peer is behind)."""
        return {p: s for p, s in self._samples.items() if p in self._nodes}

    def clock_skew_ms(self) -> int | None:
        """This node's clock minus the cluster's median clock, in ms.

        None when alone, or until every live peer was heard from since this node started
        (a partial view could hide this node's skew, e.g. 1 of 2 peers looks like a tie).
        """
        peers = set(self._nodes) - {self.node_id}
        offsets = self.peer_offsets_ms()
        if not peers or set(offsets) != peers:
            return None
        samples = list(offsets.values())
        values = sorted([0, *samples])
        mid = len(values) // 2
        if len(values) % 2:
            return values[mid]
        low, high = values[mid - 1], values[mid]
        return low if abs(low) <= abs(high) else high

    async def _publish(self) -> None:
        self.info.clock_ms = self._clock.now_ms()
        self.info.workers = sorted(set(self.local_workers()))
        await self._kv.put(
            self._keys.node_key(self.node_id), self.info.to_json(), lease=self._session.lease_id
        )

    async def _refresh_loop(self) -> None:
        while not self._session.done.is_set():
            await self._clock.sleep(self.refresh_s)
            try:
                await self._publish()
            except Unavailable as exc:
                log.warning("node %s: refreshing its record failed: %s", self.node_id, exc)

    def _on_mirror(self, listed: bool) -> None:
        now = self._clock.now_ms()
        nodes: dict[str, NodeInfo] = {}
        revs: dict[str, int] = {}
        for key, kv in self._mirror.items.items():
            info = self._parse(key, kv)
            if info is None:
                continue
            nodes[info.node_id] = info
            revs[info.node_id] = kv.mod_revision
            # Only a record that the watch just delivered carries a current clock reading.
            written_now = not listed and self._revs.get(info.node_id) != kv.mod_revision
            if info.node_id != self.node_id and written_now:
                self._sample(info.node_id, now - info.clock_ms)
        self._nodes = nodes
        self._revs = revs
        self._samples = {p: s for p, s in self._samples.items() if p in nodes}
        self._recent = {p: s for p, s in self._recent.items() if p in nodes}
        self._warn_on_pair_disagreement()
        self.changed.set()
        for listener in list(self._listeners):
            try:
                listener()
            except Exception:
                log.exception("membership listener failed")

    def _sample(self, peer: str, offset_ms: int) -> None:
        """Keeps the peer's last few samples and uses the one nearest zero: a record that
        reached this node late (the node was paused, or its watch stalled: the events come
        all at once) reads as a large false skew, while a real one shows in every sample."""
        recent = self._recent.setdefault(peer, [])
        recent.append(offset_ms)
        del recent[:-_KEEP_SAMPLES]
        self._samples[peer] = min(recent, key=abs)

    def _parse(self, key: bytes, kv: KeyValue) -> NodeInfo | None:
        try:
            info = NodeInfo.from_json(kv.value)
        except ValueError:
            log.warning("ignoring malformed node record at %r", key)
            return None
        if info.node_id != self._keys.parse_node_key(key):
            log.warning("ignoring node record %r naming another node %r", key, info.node_id)
            return None
        return info

    def _warn_on_pair_disagreement(self) -> None:
        offsets = self.peer_offsets_ms()
        if len(offsets) == 1:
            ((peer, offset),) = offsets.items()
            if abs(offset) > 1000 and not self._warned_pair:
                self._warned_pair = True
                log.warning(
                    "node %s and %s disagree on the time by %d ms; with two nodes neither "
                    "can be blamed",
                    self.node_id,
                    peer,
                    offset,
                )

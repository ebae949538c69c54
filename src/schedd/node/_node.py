"""A scheduler node: the lifecycle that assembles its roles and runs them.

node = Node(NodeConfig(node_id="n1", store=parse_store("etcd://127.0.0.1:2379")))
await node.start()      # serving; partitions are claimed in the background
...
await node.stop()       # releases partitions first, so a peer takes over at once

The node opens its store and history, then assembles every role in one place
(:meth:`Node._assemble`), each from constructor arguments: the
:class:`~._coordination.Coordinator` (session, membership, ownership) whose partitions are
:class:`~._partition.Partition` objects, the :class:`~._fire_policy.FirePolicy` they share, the
dispatcher with the :class:`~._settling.ResultRouter` behind it, :class:`~._access.Access`
(tokens, audit, tenants' limits), the :class:`~._local.LocalReads` read model, the client API
and its gate. Its background loops are supervised: one that fails is logged and restarted.
The dashboard and the metrics endpoint are not the node's: the process that runs it serves
them around it (see :meth:`Node.surface`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace

from schedd._clock import Clock, SystemClock
from schedd._errors import EncryptionKeyError
from schedd._supervise import supervised
from schedd.auth import ApiGate, ApiQuotas
from schedd.coord import Fence, NodeInfo, check_format, init_cluster
from schedd.dispatch import DispatchConfig, Dispatcher
from schedd.history import History, HistoryPruner
from schedd.node._access import Access
from schedd.node._api import NodeApi
from schedd.node._api_admin import page_size
from schedd.node._cluster_views import ClusterViews, PeerAnswers
from schedd.node._config import NodeConfig
from schedd.node._coordination import Coordinator, SessionFencing
from schedd.node._fanout import Fanout
from schedd.node._fire_policy import FirePolicy, Waiter
from schedd.node._live import OwnedPartitions
from schedd.node._local import VERSION, LocalReads
from schedd.node._metrics import node_gauges
from schedd.node._notify import ArrivalWatcher, NotifyWatcher
from schedd.node._partition import Partition
from schedd.node._server import NodeServer
from schedd.node._settling import ResultRouter
from schedd.node._tenants import Admitted
from schedd.node._upkeep import StoreUpkeep
from schedd.obs import Health, MetricsRecorder, NoopRecorder
from schedd.store import (
    KV,
    GroupCommit,
    JobStore,
    Keys,
    MeteredKV,
    PartitionStore,
    RocksConfig,
    Sealer,
    open_store,
    prepare_keyring,
)

log = logging.getLogger(__name__)

#: How long a partition's write waits for others on etcd (see NodeConfig.commit_linger_ms).
ETCD_COMMIT_LINGER_MS = 2.0

__all__ = ["VERSION", "Node", "NodeSurface"]


@dataclass(frozen=True)
class NodeSurface:
    """What the process around a node serves besides the node's gRPC port reads of it: the
    dashboard (API calls through the gate, the node's health) and the metrics endpoint (the
    recorder)."""

    node_id: str
    auth: bool
    api: NodeApi
    gate: ApiGate
    health: Health
    clock: Clock
    recorder: MetricsRecorder


class Node:
    """One scheduler node. Not reusable after :meth:`stop`.

    Args:
        config: the node's settings.
        clock: every reading and wait of the node's (the system clock by default).
        kv: the store to use (None: open ``config.store`` at start, and close it at stop).
        recorder: where the node's roles report (metrics); records nothing by default.
    """

    def __init__(
        self,
        config: NodeConfig,
        *,
        clock: Clock | None = None,
        kv: KV | None = None,
        recorder: MetricsRecorder | None = None,
    ) -> None:
        self.config = config
        self.recorder: MetricsRecorder = recorder or NoopRecorder()
        self._metered = recorder is not None
        self._given_kv = kv
        self.clock: Clock = clock or SystemClock()
        self.keys = Keys(config.prefix)
        self.started_ms = self.clock.now_ms()
        self._tasks: list[asyncio.Task[None]] = []
        self._stopping = False
        self.health = Health()
        #: Seals and opens secret fields of everything this node stores (see store.Sealer).
        self.sealer = Sealer(config.keyring)
        #: Set when the store can no longer be used by this process (:meth:`_store_failed`);
        #: ``failure`` says why. Whoever runs the node stops it then (``schedd node`` exits).
        self.failed = asyncio.Event()
        self.failure = ""

    @property
    def address(self) -> str:
        return self.server.address

    def surface(self) -> NodeSurface:
        """What the dashboard and the metrics endpoint read of this node (once started)."""
        cfg = self.config
        return NodeSurface(
            cfg.node_id, cfg.auth, self.api, self.gate, self.health, self.clock, self.recorder
        )

    # -- start / stop ----------------------------------------------------------------------

    async def start(self) -> None:
        await self._open()
        self.access = Access(self.kv, self.keys, self.config, self.clock)
        if self.config.auth:
            await self.access.load_peer_secret()
        self._assemble()
        # Jobs stored before names were unique get their name keys (once per store); names
        # they share are logged at ERROR with how to rename, and refused by name lookups.
        await self.jobs.names.index_existing()
        await self.access.start(self.dispatcher.end_sessions, self.policy)
        await self.server.start()
        self.health.set_serving(True)
        await self.dispatcher.start()
        node_gauges(self.recorder, self.partitions, self.dispatcher, self.policy,
                    self.coordinator, self.clock)  # fmt: skip
        self._run_loops()
        cfg = self.config
        log.info(
            "node %s serving on %s (P=%d, %s)", cfg.node_id, self.address, cfg.partitions,
            self.server.security(), extra={"node": cfg.node_id},
        )  # fmt: skip

    async def _open(self) -> None:
        """The history, then the store, the cluster's metadata and the keyring check."""
        cfg = self.config
        # First: a data dir still held by another process (one still stopping) fails here,
        # with a clear FailedPrecondition, before anything touches the store.
        self.history = History(
            cfg.data_dir / "history",
            ttl_ms=cfg.history_ttl_ms,
            encode=self.sealer.history_value,
            decode=self.sealer.read_history,
        )
        self.history.prune(self.clock.now_ms())
        kv = self._given_kv or await open_store(cfg.store, clock=self.clock)
        self.kv: KV = MeteredKV(kv, self._store_request) if self._metered else kv
        meta = await init_cluster(self.kv, self.keys, cfg.partitions)
        check_format(meta)
        await self._check_keys()
        if meta.partitions != cfg.partitions:
            log.warning(
                "cluster has %d partitions (fixed at init); using that", meta.partitions,
                extra={"node": cfg.node_id},
            )  # fmt: skip
        self.config = replace(cfg, partitions=meta.partitions)
        self.cluster_id = meta.cluster_id

    def _assemble(self) -> None:
        """Every role of the node, each built whole from what it needs."""
        cfg, clock = self.config, self.clock
        partitions = self.partitions = OwnedPartitions(cfg.partitions)
        fencing = self.fencing = SessionFencing(clock)
        self.policy = FirePolicy(
            cfg, clock, may_act=fencing.may_act, sealer=self.sealer, recorder=self.recorder,
            on_admitted=self._admitted, share=lambda: len(partitions) / partitions.count,
            is_live=partitions.holds,
        )  # fmt: skip
        tokens = self.access.tokens
        self.dispatcher = Dispatcher(
            cfg.node_id, ResultRouter(partitions), clock=clock, recorder=self.recorder,
            config=DispatchConfig(heartbeat_interval_ms=cfg.heartbeat_interval_ms,
                                  lease_timeout_ms=cfg.lease_timeout_ms),
            may_dispatch=fencing.may_act, live_until_ms=fencing.live_until_ms,
            authorize=tokens.authenticate if tokens is not None else None,
        )  # fmt: skip
        self._commits = self._group_commit()
        self.coordinator = Coordinator(
            self.kv, self.keys, cfg, clock, partitions, fencing,
            make_partition=self._make_partition, node_info=self._node_info,
            worker_ids=self.dispatcher.worker_ids, on_released=self.dispatcher.forget,
            recorder=self.recorder,
        )  # fmt: skip
        self.jobs = JobStore(
            self.kv, self.keys, cfg.partitions, batch=cfg.txn_items, sealer=self.sealer
        )
        self.fanout = Fanout(
            cfg.node_id, self.coordinator.members, cfg.peer_timeout_ms / 1000, tls=cfg.tls,
            max_message_bytes=cfg.max_message_bytes,
            interceptors=self.access.peer_interceptors(),
        )  # fmt: skip
        self.local = LocalReads(
            cfg.node_id, lambda: self.address, self.started_ms, clock, self.history,
            partitions, self.dispatcher, self.coordinator, self.cluster_id, self.kv.writes,
        )  # fmt: skip
        access = self.access
        self.api = NodeApi(
            self.jobs, ClusterViews(self.local, self.fanout, self.jobs), clock, auth=cfg.auth,
            audit=access.audit, limits_of=access.limits.get,
            on_token=tokens.add if tokens is not None else None,
            unserved=self.dispatcher.unserved_warning, trigger_key_ttl_ms=cfg.trigger_key_ttl_ms,
        )  # fmt: skip
        self.gate = ApiGate(
            auth=cfg.auth, tokens=tokens, audit=access.audit,
            quotas=ApiQuotas(access.limits.get, clock.now_ms),
        )  # fmt: skip
        self.server = NodeServer(
            cfg, self.api, self.gate, PeerAnswers(self.local, page_size, self.jobs),
            access.peer_secret, self.dispatcher, self.health,
            self.recorder if self._metered else None,
        )  # fmt: skip
        self.notify = NotifyWatcher(self.kv, self.keys, partitions, clock)
        self.arrivals = ArrivalWatcher(self.kv, self.keys, partitions, clock)
        self.upkeep = StoreUpkeep(
            self.kv, self.keys, cfg, clock, self.health, partitions, self._store_failed
        )

    def _run_loops(self) -> None:
        cfg = self.config
        self._run_supervised("coordinate", self.coordinator.run)
        self._run_supervised("notify watch", self.notify.run)
        self._run_supervised("arrival watch", self.arrivals.run)
        self._run_supervised("store probe", self.upkeep.probe)
        if cfg.compaction_interval_s > 0:
            self._run_supervised("compaction", self.upkeep.compact)
        if cfg.trigger_key_sweep_interval_s > 0:
            self._run_supervised("trigger key sweep", self.upkeep.sweep_trigger_keys)
        if cfg.history_prune_interval_s > 0:
            pruner = HistoryPruner(self.history, self.clock, cfg.history_prune_interval_s)
            self._run_supervised("history prune", pruner.run)
            self._run_supervised("audit prune", self.access.prune_audit)
        if self.access.tokens is not None:
            ends = self.dispatcher.end_sessions
            self._run_supervised("token expiry", lambda: self.access.expire_tokens(ends))

    async def stop(self, graceful: bool = True, timeout: float | None = None) -> None:
        """Stops the node; not reusable afterwards.

        Graceful: partitions are released first (claimed fires not yet dispatched are given
        back, owner keys deleted), so peers take over at once; then streams close and the
        server drains for up to ``server_grace_s``. Not graceful: nothing is given back; the
        session is revoked, so the owner keys go with it, and the server stops at once.
        ``timeout`` (default ``stop_timeout_s``) bounds the release.
        """
        self._stopping = True
        timeout = self.config.stop_timeout_s if timeout is None else timeout
        await self.coordinator.stop(graceful, timeout)
        for t in self._tasks:
            t.cancel()
        for t in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
        await self.access.stop()
        await self.dispatcher.stop(graceful, timeout)
        await self.server.stop(min(self.config.server_grace_s, timeout) if graceful else 0)
        await self.fanout.close()
        if self._given_kv is None:
            await self.kv.close()
        self.history.close()

    async def __aenter__(self) -> Node:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop(graceful=exc[0] is None)

    # -- what the roles are built with --------------------------------------------------------

    def _make_partition(self, fence: Fence) -> Partition:
        store = PartitionStore(
            self.kv, self.keys, fence, max_items=self.config.txn_items, sealer=self.sealer,
            committer=self._commits,
        )  # fmt: skip
        return Partition(
            store, self.config, self.clock, self.history, self.policy, self.dispatcher,
            self.coordinator, recorder=self.recorder,
        )  # fmt: skip

    def _group_commit(self) -> GroupCommit:
        """One group commit for the partitions' stores: it joins their batches in one
        transaction and bounds the transactions in flight at once."""
        cfg = self.config
        limit = cfg.max_write_txns
        linger = cfg.commit_linger_ms
        if linger is None:
            linger = 0.0 if isinstance(cfg.store, RocksConfig) else ETCD_COMMIT_LINGER_MS
        return GroupCommit(
            self.kv, linger_ms=linger, max_items=cfg.txn_items,
            write_gate=asyncio.Semaphore(limit) if limit > 0 else None,
        )  # fmt: skip

    def _node_info(self) -> NodeInfo:
        cfg = self.config
        return NodeInfo(cfg.node_id, self.address, VERSION, self.started_ms, self.clock.now_ms())

    def _admitted(self, admitted: list[Admitted[Waiter]]) -> None:
        """Fires that waited for their tenant's running slot go back to their partitions."""
        for a in admitted:
            number, live = a.item
            part = self.partitions.get(number)
            if part is not None:
                part.admitted(live, a.slot_ms)

    async def _check_keys(self) -> None:
        """Before anything is read or written: the node's keyring must open every record
        (see ``store.prepare_keyring``). If not, the node does not start: it closes what it
        opened and raises the one-line EncryptionKeyError."""
        try:
            await prepare_keyring(self.kv, self.keys, self.config.keyring)
        except EncryptionKeyError:
            if self._given_kv is None:
                await self.kv.close()
            self.history.close()
            raise

    def _store_failed(self, reason: str) -> None:
        """The store failed for good in this process (a write to its disk failed): nothing
        more can be claimed, settled or read. Said once; :attr:`failed` tells the runner."""
        if self.failed.is_set():
            return
        self.failure = reason
        log.error("%s; the node stops", reason, extra={"node": self.config.node_id})
        self.failed.set()

    def _store_request(self, op: str, seconds: float, ok: bool) -> None:
        self.recorder.store_request(op, seconds, ok)
        if op == "keepalive" and not ok:
            self.recorder.lease_keepalive_failed()

    def _run_supervised(self, name: str, run: Callable[[], Awaitable[None]]) -> None:
        task = asyncio.create_task(
            supervised(name, run, clock=self.clock, stopping=lambda: self._stopping), name=name
        )
        self._tasks.append(task)

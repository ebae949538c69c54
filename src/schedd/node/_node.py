"""A scheduler node: the lifecycle that wires coordination, partitions, dispatch and the API.

node = Node(NodeConfig(node_id="n1", store=parse_store("etcd://127.0.0.1:2379")))
await node.start()      # serving; partitions are claimed in the background
...
await node.stop()       # releases partitions first, so a peer takes over at once

The node itself only wires and runs the roles: :class:`~._partition.Partition` per owned
partition, the :class:`~._fire_policy.FirePolicy`, the :class:`~._settling.ResultRouter` behind the
dispatcher, the :class:`~._notify.NotifyWatcher` and the :class:`~._upkeep.StoreUpkeep`. Its
background loops are supervised: one that fails is logged and restarted.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import logging
from collections.abc import Awaitable, Callable
from dataclasses import replace

import grpc
from grpc_reflection.v1alpha import reflection

from schedd._clock import Clock, SystemClock
from schedd._errors import EncryptionKeyError, SchedError, Unavailable
from schedd._limits import message_size_options
from schedd._supervise import supervised
from schedd.auth import (
    PEER_METADATA,
    ApiGate,
    ApiQuotas,
    AuditLog,
    MetadataInterceptor,
    TokenRegistry,
    decode_token,
    load_peer_secret,
)
from schedd.coord import (
    Fence,
    Membership,
    NodeInfo,
    OwnershipConfig,
    PartitionOwnership,
    Session,
    init_cluster,
)
from schedd.coord._mirror import PrefixMirror
from schedd.dashboard import DashboardServer
from schedd.dispatch import DispatchConfig, Dispatcher
from schedd.history import History, HistoryPruner, Position, comes_after, list_order
from schedd.node._api import NodeApi, page_size
from schedd.node._cluster_views import ClusterViews, PeerAnswers
from schedd.node._config import NodeConfig
from schedd.node._fanout import Fanout
from schedd.node._fire_policy import FirePolicy, Waiter
from schedd.node._live import OwnedPartitions
from schedd.node._metrics import node_gauges
from schedd.node._notify import NotifyWatcher
from schedd.node._partition import Partition
from schedd.node._servicer import PeerServicer, SchedulerServicer
from schedd.node._settling import ResultRouter
from schedd.node._tenants import Admitted, describe_limits
from schedd.node._upkeep import StoreUpkeep
from schedd.node._views import advancement, matches, merge_executions
from schedd.obs import Health, MetricsRecorder, NoopRecorder
from schedd.obs._prometheus import MetricsInterceptor, MetricsServer, PrometheusRecorder
from schedd.store import (
    KV,
    JobStore,
    Keys,
    MeteredKV,
    PartitionStore,
    Sealer,
    limits_by_tenant,
    open_store,
    parse_execution_id,
    partition_of,
    prepare_keyring,
)
from schedd.v1 import (
    auth_pb2,
    execution_pb2,
    peer_pb2,
    peer_pb2_grpc,
    scheduler_pb2,
    scheduler_pb2_grpc,
    worker_pb2,
)

log = logging.getLogger(__name__)

#: What a node publishes as its version (node records, cluster status).
VERSION = "0.1.0"

#: Options of the node's gRPC server besides the message size limits (``max_message_bytes``).
SERVER_OPTIONS = [
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.min_recv_ping_interval_without_data_ms", 5_000),
    ("grpc.http2.max_ping_strikes", 0),
]


def _security(cfg: NodeConfig) -> str:
    """How the node's gRPC port is secured, for its start line."""
    if cfg.tls is None:
        return "plaintext"
    return "TLS, client certificates required" if cfg.tls.ca_file else "TLS"


class Node:
    """One scheduler node. Not reusable after :meth:`stop`."""

    def __init__(
        self,
        config: NodeConfig,
        *,
        clock: Clock | None = None,
        kv: KV | None = None,
        recorder: MetricsRecorder | None = None,
    ) -> None:
        self.config = config
        #: Where the node's roles report what happens (metrics); records nothing by default.
        if recorder is None and config.metrics_listen:
            recorder = PrometheusRecorder(("node",))
        self.recorder: MetricsRecorder = recorder or NoopRecorder()
        #: The Prometheus recorder, when metrics are on (its gauges are registered at start).
        self.metrics = recorder if isinstance(recorder, PrometheusRecorder) else None
        self.metrics_server: MetricsServer | None = None
        #: The web dashboard, when ``http_listen`` is set (started last, stopped first).
        self.dashboard: DashboardServer | None = None
        # The store; None: open config.store at start, and close it at stop.
        self._given_kv = kv
        self.clock: Clock = clock or SystemClock()
        self.keys = Keys(config.prefix)
        self.port = 0
        self.started_ms = self.clock.now_ms()
        self._tasks: list[asyncio.Task[None]] = []
        self._stopping = False
        # The partitions' fenced writes in flight to etcd at once (NodeConfig.max_write_txns).
        limit = config.max_write_txns
        self._write_gate = asyncio.Semaphore(limit) if limit > 0 else None
        self._ownership: PartitionOwnership | None = None
        self._membership: Membership | None = None
        self._session: Session | None = None
        self.tenant_limits: PrefixMirror | None = None
        #: Every tenant's limits, quotas included (the firer's limiter gets those on fires).
        self.all_limits: dict[str, scheduler_pb2.TenantLimits] = {}
        self.tokens_mirror: PrefixMirror | None = None
        self.token_registry: TokenRegistry | None = None
        self.peer_secret: str | None = None
        self.health = Health()
        #: Seals and opens secret fields of everything this node stores (see store.Sealer).
        self.sealer = Sealer(config.keyring)
        #: Set when the store can no longer be used by this process (:meth:`_store_failed`);
        #: ``failure`` says why. Whoever runs the node stops it then (``schedd node`` exits).
        self.failed = asyncio.Event()
        self.failure = ""

    # -- start / stop ----------------------------------------------------------------------

    async def start(self) -> None:
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
        self.kv: KV = self._given_kv or await open_store(cfg.store, clock=self.clock)
        if self.metrics is not None:
            self.kv = MeteredKV(self.kv, self._store_request)
        meta = await init_cluster(self.kv, self.keys, cfg.partitions)
        await self._check_keys()
        if meta.partitions != cfg.partitions:
            log.warning(
                "cluster has %d partitions (fixed at init); using that", meta.partitions,
                extra={"node": cfg.node_id},
            )  # fmt: skip
        self.config = cfg = replace(cfg, partitions=meta.partitions)
        self.cluster_id = meta.cluster_id
        partitions = self.partitions = OwnedPartitions(cfg.partitions)

        def is_live(execution_id: str) -> bool:
            part = partitions.of_execution(execution_id)
            return part is not None and execution_id in part.live

        # Self-fencing: nothing is fired or handed out while the session may have expired.
        self.policy = FirePolicy(
            cfg, self.clock, may_act=self._may_act, sealer=self.sealer, recorder=self.recorder,
            on_admitted=self._admitted, share=lambda: len(partitions) / partitions.count,
            is_live=is_live,
        )  # fmt: skip
        dcfg = DispatchConfig(
            heartbeat_interval_ms=cfg.heartbeat_interval_ms, lease_timeout_ms=cfg.lease_timeout_ms
        )
        self.dispatcher = Dispatcher(
            cfg.node_id, ResultRouter(partitions), config=dcfg, clock=self.clock,
            recorder=self.recorder,
        )  # fmt: skip
        self.dispatcher.may_dispatch = self._may_act
        self.dispatcher.live_until_ms = self._live_until_ms
        self.jobs = JobStore(
            self.kv, self.keys, cfg.partitions, batch=cfg.txn_items, sealer=self.sealer
        )
        self.fanout = Fanout(
            cfg.node_id,
            self._members,
            cfg.peer_timeout_ms / 1000,
            tls=cfg.tls,
            max_message_bytes=cfg.max_message_bytes,
        )
        self.views = ClusterViews(self, self.fanout, self.jobs)
        # Jobs stored before names were unique get their name keys (once per store); names
        # they share are logged at ERROR with how to rename, and refused by name lookups.
        await self.jobs.names.index_existing()
        await self._start_auth()
        await self._serve()
        await self.dispatcher.start()
        await self._start_surfaces()
        await self._watch_tenants()
        self.notify = NotifyWatcher(self.kv, self.keys, self.partitions, self.clock)
        self.upkeep = StoreUpkeep(
            self.kv, self.keys, cfg, self.clock, self.health, self.partitions, self._store_failed
        )
        self._run_supervised("coordinate", self._coordinate)
        self._run_supervised("notify watch", self.notify.run)
        self._run_supervised("store probe", self.upkeep.probe)
        if cfg.compaction_interval_s > 0:
            self._run_supervised("compaction", self.upkeep.compact)
        if cfg.history_prune_interval_s > 0:
            pruner = HistoryPruner(self.history, self.clock, cfg.history_prune_interval_s)
            self._run_supervised("history prune", pruner.run)
            self._run_supervised("audit prune", self._prune_audit)
        log.info(
            "node %s serving on %s (P=%d, %s)", cfg.node_id, self.address, cfg.partitions,
            _security(cfg), extra={"node": cfg.node_id},
        )  # fmt: skip

    async def _start_surfaces(self) -> None:
        """The metrics endpoint and the dashboard, when configured."""
        cfg = self.config
        if self.metrics is not None:
            node_gauges(self, self.metrics)
            if cfg.metrics_listen:
                self.metrics_server = MetricsServer(self.metrics, cfg.metrics_listen, tls=cfg.tls)
                await self.metrics_server.start()
        if cfg.http_listen:
            self.dashboard = DashboardServer(
                self, cfg.http_listen, actions=cfg.http_actions, tls=cfg.tls
            )
            await self.dashboard.start()

    async def _start_auth(self) -> None:
        """The client API behind its gate: tokens (with auth on), quotas, the audit trail;
        with auth on, peers and worker streams need their credentials too."""
        cfg = self.config
        self.audit = AuditLog(
            self.kv, self.keys, cfg.node_id, self.clock, retention_ms=cfg.history_ttl_ms
        )
        if cfg.auth:
            await self._watch_tokens()
            self.peer_secret = await load_peer_secret(self.kv, self.keys)
            self.fanout.interceptors = [MetadataInterceptor(PEER_METADATA, self.peer_secret)]
        registry = self.token_registry
        self.api = NodeApi(
            self.jobs, self.views, self.clock, auth=cfg.auth, audit=self.audit,
            limits_of=self.all_limits.get, on_token=registry.add if registry else None,
            unserved=self.dispatcher.unserved_warning,
        )  # fmt: skip
        self.gate = ApiGate(
            auth=cfg.auth, tokens=registry, audit=self.audit,
            quotas=ApiQuotas(self.all_limits.get, self.clock.now_ms),
        )  # fmt: skip
        if registry is not None:
            self.dispatcher.authorize = registry.authenticate

    async def _watch_tokens(self) -> None:
        """Mirrors the API tokens into the registry calls are checked against."""
        registry = self.token_registry = TokenRegistry(self.clock.now_ms, self._fetch_token)
        mirror = self.tokens_mirror = PrefixMirror(
            self.kv, self.keys.tokens_prefix(), clock=self.clock
        )

        def changed(_listed: bool) -> None:
            registry.replace(list(mirror.items.values()))
            self.dispatcher.end_sessions(registry.refused, "revoked, expired or deleted")

        mirror.add_listener(changed)
        await mirror.start()
        self._run_supervised("token expiry", self._expire_tokens)

    async def _expire_tokens(self) -> None:
        """Ends the worker streams of tokens that expired (revocations end them at once)."""
        registry = self.token_registry
        while registry is not None:
            await self.clock.sleep(5.0)
            self.dispatcher.end_sessions(registry.refused, "expired")

    async def _fetch_token(self, token_id: str) -> auth_pb2.ApiToken | None:
        kv = await self.kv.get(self.keys.token_key(token_id))
        return decode_token(kv.value) if kv is not None else None

    async def _prune_audit(self) -> None:
        """Deletes audit entries older than the history's retention, every few minutes."""
        while True:
            try:
                await self.audit.prune()
            except SchedError as exc:
                log.info("audit prune failed (tried again later): %s", exc)
            await self.clock.sleep(max(60.0, self.config.history_prune_interval_s * 5))

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

    async def _watch_tenants(self) -> None:
        """Mirrors the tenants' limits into the fire policy's limiter; this node enforces the
        share of them that its partitions are of all partitions."""
        limiter = self.policy.tenants
        mirror = self.tenant_limits = PrefixMirror(
            self.kv, self.keys.tenants_prefix(), clock=self.clock
        )

        def changed(_listed: bool) -> None:
            every = limits_by_tenant(list(mirror.items.values()))
            self.all_limits.clear()
            self.all_limits.update(every)
            limits = {t: lim for t, lim in every.items() if lim.rate or lim.max_running}
            if limits != limiter.limits():
                log.info(
                    "tenant limits: %s", describe_limits(limits) or "none",
                    extra={"node": self.config.node_id},
                )  # fmt: skip
            self.policy.set_limits(limits)

        mirror.add_listener(changed)
        await mirror.start()

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

    def _may_act(self) -> bool:
        """Whether this node's session is certainly alive (see ``Session.may_act``)."""
        session = self._session
        return session is not None and session.may_act()

    def _live_until_ms(self) -> int:
        """The instant (this node's clock) until which it certainly holds its fences: what it
        promises workers holding its executions (0: no promise)."""
        session = self._session
        left_s = session.held_for_s() if session is not None else 0.0
        return self.clock.now_ms() + int(left_s * 1000) if left_s > 0 else 0

    def _run_supervised(self, name: str, run: Callable[[], Awaitable[None]]) -> None:
        task = asyncio.create_task(
            supervised(name, run, clock=self.clock, stopping=lambda: self._stopping), name=name
        )
        self._tasks.append(task)

    @property
    def address(self) -> str:
        host = self.config.listen.rpartition(":")[0]
        return self.config.advertise or f"{host}:{self.port}"

    async def _serve(self) -> None:
        cfg = self.config
        interceptors = [MetricsInterceptor(self.recorder.grpc_request)] if self.metrics else []
        options = [*SERVER_OPTIONS, *message_size_options(cfg.max_message_bytes)]
        self.server = grpc.aio.server(options=options, interceptors=interceptors)
        servicer = SchedulerServicer(self.api, self.gate)
        scheduler_pb2_grpc.add_SchedulerServicer_to_server(servicer, self.server)
        peer = PeerServicer(PeerAnswers(self, page_size), self.peer_secret)
        peer_pb2_grpc.add_PeerServicer_to_server(peer, self.server)
        self.dispatcher.add_to_server(self.server)
        self.health.add_to_server(self.server)
        names = (
            scheduler_pb2.DESCRIPTOR.services_by_name["Scheduler"].full_name,
            worker_pb2.DESCRIPTOR.services_by_name["Worker"].full_name,
            peer_pb2.DESCRIPTOR.services_by_name["Peer"].full_name,
            self.health.service_name,
            reflection.SERVICE_NAME,
        )
        reflection.enable_server_reflection(names, self.server)
        if cfg.tls is None:
            self.port = self.server.add_insecure_port(cfg.listen)
        else:
            self.port = self.server.add_secure_port(cfg.listen, cfg.tls.server_credentials())
        if self.port == 0:
            raise Unavailable(f"cannot listen on {cfg.listen}")
        await self.server.start()
        self.health.set_serving(True)

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
        if self.dashboard is not None:
            await self.dashboard.stop()
        if graceful and self._ownership is not None:
            try:
                await asyncio.wait_for(self._ownership.release_all(), timeout)
            except (TimeoutError, SchedError) as exc:
                log.warning(
                    "node %s: releasing partitions failed: %s", self.config.node_id, exc,
                    extra={"node": self.config.node_id},
                )  # fmt: skip
        for t in self._tasks:
            t.cancel()
        for t in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
        reason = "shutdown" if graceful else "stopped"
        for p in self.partitions:
            await self._lost(p, reason)
        await self._close_session()
        if self.tenant_limits is not None:
            await self.tenant_limits.close()
        if self.tokens_mirror is not None:
            await self.tokens_mirror.close()
        await self.dispatcher.stop(graceful, timeout)
        await self.server.stop(min(self.config.server_grace_s, timeout) if graceful else 0)
        await self.fanout.close()
        if self.metrics_server is not None:
            await self.metrics_server.stop()
        if self._given_kv is None:
            await self.kv.close()
        self.history.close()

    async def _close_session(self) -> None:
        if self._membership is not None:
            with contextlib.suppress(Exception):
                await self._membership.close()
        if self._session is not None:
            with contextlib.suppress(Exception):
                await self._session.close()

    # -- coordination ------------------------------------------------------------------------

    async def _coordinate(self) -> None:
        """Keeps a session and the partition share; a lost session is replaced by a new one."""
        while not self._stopping:
            try:
                await self._one_session()
            except SchedError as exc:
                log.warning(
                    "node %s: coordination failed: %s; retrying", self.config.node_id, exc,
                    extra={"node": self.config.node_id},
                )  # fmt: skip
            except Exception:
                # Its partitions' fences live on this session, which is closed below: stop
                # them first, so nothing runs under a fence the node no longer keeps.
                log.exception(
                    "node %s: coordination crashed; starting over", self.config.node_id,
                    extra={"node": self.config.node_id},
                )  # fmt: skip
                for p in self.partitions:
                    await self._lost(p, "coordination crashed")
            if self._stopping:
                # The ownership returned because stop() is releasing the partitions: their
                # give-backs and deletes are fenced by owner keys that live on this session,
                # so stop() closes it once they are done.
                return
            await self._close_session()
            await self.clock.sleep(1.0)

    async def _one_session(self) -> None:
        cfg = self.config
        self._session = Session(self.kv, ttl_s=cfg.session_ttl_s, clock=self.clock)
        await self._session.start()
        info = NodeInfo(cfg.node_id, self.address, VERSION, self.started_ms, self.clock.now_ms())
        self._membership = Membership(
            self.kv, self.keys, self._session, info, clock=self.clock, workers=self._worker_ids
        )
        await self._membership.start()
        self._ownership = PartitionOwnership(
            self.kv,
            self.keys,
            self._session,
            self._membership,
            OwnershipConfig(cfg.partitions, max_clock_skew_ms=cfg.max_clock_skew_ms),
            on_acquired=self._acquired,
            on_lost=self._lost,
            clock=self.clock,
        )
        await self._ownership.run()

    def _worker_ids(self) -> set[str]:
        return self.dispatcher.worker_ids() if self.dispatcher is not None else set()

    async def _acquired(self, fence: Fence) -> None:
        store = PartitionStore(
            self.kv,
            self.keys,
            fence,
            max_items=self.config.txn_items,
            write_gate=self._write_gate,
            sealer=self.sealer,
        )
        part = Partition(
            store, self.config, self.clock, self.history, self.policy, self.dispatcher, self,
            recorder=self.recorder,
        )  # fmt: skip
        self.partitions.add(part)
        self.recorder.ownership_changed()
        self.recorder.partitions_owned(len(self.partitions))
        try:
            await part.start()
        except SchedError:
            self.partitions.remove(fence.partition)
            await part.stop()
            raise

    async def _lost(self, partition: int, reason: str) -> None:
        part = self.partitions.get(partition)
        if part is None:
            return
        # Handed over on purpose: claimed fires are given back first, while the partition
        # still runs here under a fence that holds (the ownership deletes the key after).
        graceful = reason in ("shutdown", "rebalance", "clock skew")
        ids = await part.stop(graceful=graceful, timeout=self.config.stop_timeout_s)
        self.partitions.remove(partition)
        self.recorder.ownership_changed()
        self.recorder.partitions_owned(len(self.partitions))
        self.dispatcher.forget(ids)
        log.info(
            "partition %d released (%s)", partition, reason,
            extra={"node": self.config.node_id, "partition": partition},
        )  # fmt: skip

    def _admitted(self, admitted: list[Admitted[Waiter]]) -> None:
        """Fires that waited for their tenant's running slot go back to their partitions."""
        for a in admitted:
            number, live = a.item
            part = self.partitions.get(number)
            if part is not None:
                part.admitted(live, a.slot_ms)

    def partition_lost(self, partition: int, reason: str) -> None:
        """A partition's fence no longer holds (:class:`PartitionEvents`): stop it."""
        task = asyncio.get_running_loop().create_task(self._lost(partition, reason))
        self._tasks.append(task)

    def partition_failed(self, partition: int, reason: str) -> None:
        """A partition's part crashed: stop it and give the partition up, so it is claimed
        afresh (by a peer, or by this node with a new part) instead of staying owned and
        silent."""

        async def release() -> None:
            ownership = self._ownership
            if ownership is not None and partition in ownership.owned():
                await ownership.release(partition, f"runner failed: {reason}")
            await self._lost(partition, f"runner failed: {reason}")

        task = asyncio.get_running_loop().create_task(release())
        self._tasks.append(task)

    # -- LocalParts: what this node answers about itself (to itself and to peers) -----------

    def local_executions(
        self, req: scheduler_pb2.ListExecutionsRequest, after: Position | None, limit: int
    ) -> tuple[list[execution_pb2.Execution], bool]:
        """Its history and its claimed, unfinished executions (with the dispatch state only
        memory has), up to ``limit`` after ``after``; and whether it holds more."""
        states = list(req.states)
        done = self.history.page(
            job_id=req.job_id, tenant=req.tenant, states=states, after=after, limit=limit
        )
        held = [
            live.ex
            for part in self.partitions.values()
            for live in part.live.values()
            if matches(live.ex, req.job_id, req.tenant, states) and comes_after(live.ex, after)
        ]
        live = [self._with_waiting(ex) for ex in heapq.nsmallest(limit, held, key=list_order)]
        merged = merge_executions([done, live])
        more = len(done) >= limit or len(held) > limit or len(merged) > limit
        return merged[:limit], more

    def local_execution(self, execution_id: str) -> execution_pb2.Execution | None:
        job_id, _ = parse_execution_id(execution_id)
        part = self.partitions.get(partition_of(job_id, self.config.partitions))
        live = part.live.get(execution_id) if part else None
        done = self.history.get(execution_id)
        found = [done] if done is not None else []
        if live is not None:
            found.append(self._with_waiting(live.ex))
        return max(found, key=advancement) if found else None

    def _with_waiting(self, ex: execution_pb2.Execution) -> execution_pb2.Execution:
        """A copy of a live execution (memory moves on), with why it waits for a worker."""
        copy = execution_pb2.Execution()
        copy.CopyFrom(ex)
        reason = self.dispatcher.waiting_reason(ex.id)
        if reason is not None:
            copy.waiting = reason.text
            copy.waiting_since_ms = reason.since_ms
        return copy

    def local_status(self) -> peer_pb2.LocalStatus:
        membership, ownership = self._membership, self._ownership
        me = scheduler_pb2.NodeStatus(
            node_id=self.config.node_id,
            address=self.address,
            version=VERSION,
            started_ms=self.started_ms,
            clock_ms=self.clock.now_ms(),
            partitions_owned=len(self.partitions),
            reported=True,
        )
        skew = membership.clock_skew_ms() if membership is not None else None
        me.clock_skew_known = skew is not None
        me.clock_skew_ms = skew or 0
        if membership is None or ownership is None:
            me.ineligible_reason = "no session with the store yet"
        elif ownership.skew_reason or ownership.join_reason:
            me.ineligible_reason = ownership.skew_reason or ownership.join_reason
        elif not membership.info.eligible:
            me.ineligible_reason = "clock not yet compared with the peers' clocks"
        else:
            me.eligible = True
        if ownership is not None:
            for p, fence in sorted(ownership.owned().items()):
                me.owned.add(partition=p, owner=self.config.node_id, epoch=fence.epoch)
        return peer_pb2.LocalStatus(node=me, workers=self.dispatcher.workers())

    def _members(self) -> dict[str, str]:
        membership = self._membership
        if membership is None:
            return {}
        return {n: info.address for n, info in membership.live_nodes().items()}

    async def membership_status(self) -> scheduler_pb2.ClusterStatus:
        status = scheduler_pb2.ClusterStatus(
            cluster_id=self.cluster_id, partition_count=self.config.partitions
        )
        owners: dict[str, int] = {}
        if self._ownership is not None:
            for p, owner, epoch in await self._ownership.partitions_status():
                status.partitions.append(
                    scheduler_pb2.PartitionStatus(partition=p, owner=owner, epoch=epoch)
                )
                owners[owner] = owners.get(owner, 0) + 1
        if self._membership is not None:
            for info in sorted(self._membership.live_nodes().values(), key=lambda i: i.node_id):
                status.nodes.append(
                    scheduler_pb2.NodeStatus(
                        node_id=info.node_id,
                        address=info.address,
                        version=info.version,
                        started_ms=info.started_ms,
                        clock_ms=info.clock_ms,
                        partitions_owned=owners.get(info.node_id, 0),
                    )
                )
        return status

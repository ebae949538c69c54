"""Typed configuration of a scheduler node (read from flags and env only at the edge)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from schedd._limits import GRPC_MAX_MESSAGE_BYTES
from schedd._tls import TlsFiles
from schedd.store import DEFAULT_PREFIX, TRIGGER_KEY_TTL_MS, EtcdConfig, Keyring, StoreConfig


@dataclass(frozen=True)
class NodeConfig:
    """Everything a node needs.

    Attributes:
        node_id: unique and stable per node (its partitions and history are keyed by it).
        listen: ``host:port`` of the gRPC server (client API and worker streams).
        advertise: address other parties should use; defaults to ``listen``.
        metrics_listen: ``host:port`` of the Prometheus ``/metrics`` endpoint ("": none).
        http_listen: ``host:port`` of the web dashboard ("": none).
        tls: TLS on the gRPC port (None: plaintext). Its certificate serves every service;
            with a CA, clients (workers, schedctl, peers) must present a certificate signed
            by it. The node dials its peers with TLS too, its own certificate as client
            certificate. The dashboard and the metrics endpoint serve HTTPS with the same
            certificate, asking no client certificate (browsers, Prometheus).
        max_message_bytes: the largest gRPC message the node receives or sends (larger ones
            are refused with RESOURCE_EXHAUSTED); also the limit of its calls to peers.
        http_actions: whether the dashboard offers pause, resume, trigger and redrive (off:
            read-only, every POST answers 403).
        auth: whether API calls, worker streams, peer calls and the dashboard need a token
            (:mod:`schedd.auth`); every node of a cluster must agree.
        store: the store (:func:`schedd.store.parse_store`): an etcd cluster, or an embedded
            RocksDB directory (one machine: this node owns every partition).
        prefix: key prefix of this cluster in the store.
        partitions: P, fixed at cluster init (later nodes use the stored value).
        data_dir: local state (run history).
        window_ms: W, how far ahead the due index is loaded into the wheel.
        lead_ms: L, how long before its fire an execution is claimed durably. Not a whole
            number of seconds on purpose: jobs aligned to seconds then become claimable
            between fire instants, so a burst of claim work never delays a burst of fires.
        claim_slice_ms: a claim round takes every fire due up to ``now + lead_ms + claim_slice_ms``,
            so fires spread over time (jitter) are claimed a slice at a time in one batch each,
            not one transaction per fire.
        grace_ms: a fire later than this is a misfire, handled by the job's policy.
        tick_ms: timer wheel tick (a timer fires at the end of its tick: the lateness floor).
        fire_slice: most fires dispatched on one event-loop pass; the partitions due beyond it
            fire on the next pass, after the stream writes of the first (0: no limit).
        hold_ms: how long before its instant an execution may be sent to a worker that holds
            it (one whose Hello asked for prefetch) and starts it then by its own timer, so a
            burst's fire instant involves no node and no network. Only jobs whose overlap
            policy is ALLOW (the decision cannot depend on what runs at the instant); when no
            worker can hold it, it fires at its instant as usual (0: never sent ahead).
        session_ttl_s: the node lease's TTL (ownership is lost this long after a crash).
        max_clock_skew_ms: a node further than this from the cluster's median clock owns nothing.
        claim_batch: most due entries claimed in one round.
        claim_rate: claims per second the node expects to sustain across all its partitions
            (each partition plans with its share, or with its own measured rate if lower);
            the lead stretches ahead of a burst by its backlog at that rate.
        txn_items: most jobs in one etcd transaction (etcd's --max-txn-ops bounds it).
        max_write_txns: fenced write transactions (claims, results, redeliveries) the node's
            partitions have in flight to etcd at once. Past a few, more in flight only queue
            inside etcd, where under load they delayed the node's own lease keep-alives past
            its fencing instant, and it dropped every partition (measured: docs/performance
            .md). Waiting here instead lets the next claim and settle rounds take larger
            batches (0: no bound).
        commit_linger_ms: how long a partition's fenced write waits for other partitions'
            writes to go with it in one store transaction (group commit; 0: only those of the
            same event-loop pass). Results, claims and redeliveries wait up to this long; a
            fire never does (firing writes nothing). None: 2 ms on etcd (a transaction is a
            network round trip and a Raft proposal), 0 on the embedded store (its write-ahead
            log already syncs concurrent transactions together).
        max_dispatch_backlog: while this many claimed executions wait in the node's dispatch
            queue for a worker (none has a credit free), partitions claim nothing: due
            entries stay durable in etcd and are claimed once the queue drains, late (the
            job's misfire policy decides; a catch-up job's missed fires then go in one claim),
            and the node's time goes to handing out and settling what it claimed. It bounds
            the queue at this plus the claims in flight when it is reached (0: no bound).
        lease_timeout_ms: a dispatched execution not heartbeated this long is redelivered.
        heartbeat_interval_ms: what workers are told to heartbeat at.
        default_timeout_ms: per-attempt timeout when a job sets none.
        compaction_interval_s: how often the node compacts etcd's history (0: never).
        compaction_keep_revisions: how many revisions of history compaction keeps.
        trigger_key_ttl_ms: how long a trigger's idempotency key is remembered (24 h).
        trigger_key_sweep_interval_s: how often expired trigger keys are deleted (one node
            does it, the owner of partition 0; 0: never, a trigger still treats an expired
            key as absent).
        history_ttl_ms: how long finished executions stay in the local history.
        history_prune_interval_s: how often history older than ``history_ttl_ms`` is deleted
            (besides once at start; 0: only at start).
        peer_timeout_ms: how long a cluster-wide view (run list, run get, cluster status)
            waits for each peer's part; a peer that has not answered by then is reported in
            the answer's ``missing_nodes``.
        stop_timeout_s: how long a graceful stop may spend releasing partitions.
        server_grace_s: how long a graceful stop lets the gRPC server finish its calls.
        keyring: the keys that encrypt payloads, checkpoints, HTTP header and shell env values
            in etcd and the run history (``--encryption-keys``; the last key encrypts new
            values). None: they are written in plaintext, and the node refuses to start
            in a cluster whose records are encrypted (docs/operations.md).
    """

    node_id: str
    listen: str = "127.0.0.1:7070"
    advertise: str = ""
    metrics_listen: str = ""
    http_listen: str = ""
    http_actions: bool = False
    auth: bool = False
    tls: TlsFiles | None = None
    max_message_bytes: int = GRPC_MAX_MESSAGE_BYTES
    store: StoreConfig = field(default_factory=EtcdConfig)
    prefix: bytes = DEFAULT_PREFIX
    partitions: int = 64
    data_dir: Path = Path(".schedd-node")
    window_ms: int = 60_000
    lead_ms: int = 1_500
    claim_slice_ms: int = 500
    grace_ms: int = 1_000
    tick_ms: int = 1
    fire_slice: int = 512
    hold_ms: int = 2_000
    session_ttl_s: int = 5
    max_clock_skew_ms: int = 500
    claim_batch: int = 4096
    claim_rate: float = 3000.0
    txn_items: int = 128
    max_write_txns: int = 4
    commit_linger_ms: float | None = None
    max_dispatch_backlog: int = 20_000
    lease_timeout_ms: int = 15_000
    heartbeat_interval_ms: int = 3_000
    default_timeout_ms: int = 300_000
    compaction_interval_s: float = 60.0
    compaction_keep_revisions: int = 50_000
    trigger_key_ttl_ms: int = TRIGGER_KEY_TTL_MS
    trigger_key_sweep_interval_s: float = 60.0
    history_ttl_ms: int = 7 * 86_400_000
    history_prune_interval_s: float = 60.0
    peer_timeout_ms: int = 2_000
    stop_timeout_s: float = 10.0
    server_grace_s: float = 5.0
    keyring: Keyring | None = None

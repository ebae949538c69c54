"""The etcd key layout, in one place: a ``*_key()`` builder beside each ``parse_*_key()`` parser.

Every key lives under a configurable prefix (default ``/schedd/v1/``)::

    meta/cluster                      partition count, format version (written once)
    meta/encryption                   encryption key ids in use, a canary per key (JSON)
    nodes/{node}                      NodeInfo JSON, attached to the node's session lease
    owners/{p:04d}                    owning node id, attached to its lease; create_revision = epoch
    jobs/{job}                        Job protobuf: the spec, written only by the client API
    state/{job}                       JobState JSON: next due key, next and last fire (small,
                                      rewritten by every claim so the spec is never rewritten)
    notify/{p:04d}                    job ids the API just changed; the owner watches notify/
    due/{p:04d}/{due_ms:013d}/{job}   DueEntry FIRE: the job's next schedule fire
    due/{p:04d}/{due_ms:013d}/{job}/{sched_ms:013d}
                                      DueEntry RUN: the durable timer of one execution (a
                                      retry, trigger, redrive); it names the execution, so two
                                      executions due at one instant never share a key
    runs/{p:04d}/{job}/{sched_ms:013d} Execution protobuf; mod_revision = fencing token
    dlq/{tenant}/{job}/{sched_ms:013d} Execution protobuf (state DEAD)
    idem/{tenant}/{key}               job id (idempotent create)
    arrive/{p:04d}/{child}/{T:013d}/{parent}
                                      b"ok" or b"skip:{reason}": how the parent's execution for
                                      the root fire T ended, written by the parent's owner with
                                      that result; the child's owner starts or skips child@T
    dskip/{p:04d}/{child}/{T:013d}    why child@T was skipped (its children were told so)
    tidem/{tenant}/{job}/{key}        TriggerKey JSON: the execution an idempotent trigger made,
                                      when, and its payload's digest; deleted once older than
                                      the key's lifetime (24 h) and with the job
    tenants/{tenant}                  TenantLimits protobuf (rate, burst, max_running); every node
                                      mirrors the prefix
    tjobs/{tenant}/{job}              empty: the tenant's jobs, counted for its max_jobs quota
    auth/tokens/{id}                  ApiToken protobuf (the secret's hash); every node mirrors it
    auth/peer-secret                  random bytes the nodes present to each other (Peer calls)
    audit/{at_ms:013d}/{node}/{seq}   AuditEntry protobuf: one mutation

Numbers are zero-padded so that key order is time order: a range scan of ``due/p/`` up to
``due/p/{now+W}`` costs what is due, not what is stored.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

DEFAULT_PREFIX = b"/schedd/v1/"


def partition_of(job_id: str, partitions: int) -> int:
    """The stable partition of a job: the first 8 bytes of its SHA-1, mod P."""
    digest = hashlib.sha1(job_id.encode(), usedforsecurity=False).digest()
    return int.from_bytes(digest[:8], "big") % partitions


@dataclass(frozen=True)
class Keys:
    """Key builders and parsers bound to one prefix."""

    prefix: bytes = DEFAULT_PREFIX

    # -- cluster, nodes, owners ---------------------------------------------------------------
    def meta_key(self) -> bytes:
        return self.prefix + b"meta/cluster"

    def encryption_key(self) -> bytes:
        """``meta/encryption``: the ids of the keys records are encrypted with, and a canary
        per key (see ``store/_keys_in_use.py``)."""
        return self.prefix + b"meta/encryption"

    def nodes_prefix(self) -> bytes:
        return self.prefix + b"nodes/"

    def node_key(self, node_id: str) -> bytes:
        return self.nodes_prefix() + node_id.encode()

    def parse_node_key(self, key: bytes) -> str:
        return key[len(self.nodes_prefix()) :].decode()

    def owners_prefix(self) -> bytes:
        return self.prefix + b"owners/"

    def owner_key(self, partition: int) -> bytes:
        return self.owners_prefix() + b"%04d" % partition

    def parse_owner_key(self, key: bytes) -> int:
        return int(key[len(self.owners_prefix()) :])

    # -- jobs -----------------------------------------------------------------------------------
    def jobs_prefix(self) -> bytes:
        return self.prefix + b"jobs/"

    def job_key(self, job_id: str) -> bytes:
        return self.jobs_prefix() + job_id.encode()

    def parse_job_key(self, key: bytes) -> str:
        return key[len(self.jobs_prefix()) :].decode()

    def states_prefix(self) -> bytes:
        return self.prefix + b"state/"

    def state_key(self, job_id: str) -> bytes:
        return self.states_prefix() + job_id.encode()

    def notify_prefix(self) -> bytes:
        return self.prefix + b"notify/"

    def notify_key(self, partition: int) -> bytes:
        return self.notify_prefix() + b"%04d" % partition

    def parse_notify_key(self, key: bytes) -> int:
        return int(key[len(self.notify_prefix()) :])

    def tenants_prefix(self) -> bytes:
        return self.prefix + b"tenants/"

    def tenant_key(self, tenant: str) -> bytes:
        return self.tenants_prefix() + tenant.encode()

    def tenant_jobs_prefix(self, tenant: str) -> bytes:
        return self.prefix + b"tjobs/" + tenant.encode() + b"/"

    def tenant_job_key(self, tenant: str, job_id: str) -> bytes:
        return self.tenant_jobs_prefix(tenant) + job_id.encode()

    def tokens_prefix(self) -> bytes:
        return self.prefix + b"auth/tokens/"

    def token_key(self, token_id: str) -> bytes:
        return self.tokens_prefix() + token_id.encode()

    def peer_secret_key(self) -> bytes:
        return self.prefix + b"auth/peer-secret"

    def audit_prefix(self) -> bytes:
        return self.prefix + b"audit/"

    def audit_key(self, at_ms: int, node_id: str, seq: int) -> bytes:
        return self.audit_prefix() + b"%013d/" % at_ms + f"{node_id}/{seq:08d}".encode()

    def names_prefix(self) -> bytes:
        return self.prefix + b"names/"

    def name_key(self, tenant: str, name: str) -> bytes:
        """The job named ``name`` in ``tenant`` (its value: the job id). The tenant goes in
        with its length, so no tenant and name pair reads as another."""
        t = tenant.encode()
        return self.names_prefix() + b"%d:" % len(t) + t + b"/" + name.encode()

    def names_indexed_key(self) -> bytes:
        """Set once every job stored before names were unique has its name key."""
        return self.prefix + b"meta/names-indexed"

    def idem_prefix(self, tenant: str) -> bytes:
        return self.prefix + f"idem/{tenant}/".encode()

    def idem_key(self, tenant: str, idempotency_key: str) -> bytes:
        return self.idem_prefix(tenant) + idempotency_key.encode()

    def trigger_idem_prefix(self, tenant: str | None = None, job_id: str | None = None) -> bytes:
        """``tidem/``, or the trigger keys of a tenant, or of one of its jobs. Tenants, job
        ids and keys cannot contain ``/`` (``model.check_text``), so no prefix reads as another."""
        base = self.prefix + b"tidem/"
        if tenant is None:
            return base
        base += tenant.encode() + b"/"
        return base if job_id is None else base + job_id.encode() + b"/"

    def trigger_idem_key(self, tenant: str, job_id: str, idempotency_key: str) -> bytes:
        """The trigger of ``job_id`` made with ``idempotency_key`` (``store/_triggers.py``)."""
        return self.trigger_idem_prefix(tenant, job_id) + idempotency_key.encode()

    # -- due index ------------------------------------------------------------------------------
    def due_prefix(self, partition: int) -> bytes:
        return self.prefix + b"due/%04d/" % partition

    def due_key(self, partition: int, due_ms: int, job_id: str) -> bytes:
        return _due_key(self.due_prefix(partition), due_ms, job_id.encode())

    def run_due_key(self, partition: int, due_ms: int, job_id: str, scheduled_ms: int) -> bytes:
        """The RUN entry of the execution ``job_id@scheduled_ms``, due at ``due_ms``."""
        return _run_due_key(self.due_prefix(partition), due_ms, job_id.encode(), scheduled_ms)

    def due_until(self, partition: int, until_ms: int) -> bytes:
        """Range end that includes every due key with ``due_ms <= until_ms``."""
        return self.due_prefix(partition) + b"%013d0" % until_ms

    def parse_due_key(self, key: bytes) -> tuple[int, int, str, int]:
        """``due/{p}/{ms}/{job}[/{sched}]`` -> (partition, due_ms, job_id, sched_ms or 0).

        Job ids cannot contain ``/`` (see ``model.check_text``), so a fourth part is always
        the scheduled time of the execution a RUN entry names. 0: a FIRE key, or a RUN key
        written before RUN keys named their execution (format 1 nodes).
        """
        rest = key[len(self.prefix) + len(b"due/") :]
        p, ms, job = rest.split(b"/", 2)
        job, _, sched = job.partition(b"/")
        return int(p), int(ms), job.decode(), int(sched or 0)

    # -- checkpoints ----------------------------------------------------------------------------
    def ckpt_prefix(self, partition: int) -> bytes:
        """``ckpt/{p}/``: the latest checkpoint of live executions, beside their run keys (a
        checkpoint written into the run key would change its mod revision, the token)."""
        return self.prefix + b"ckpt/%04d/" % partition

    def ckpt_job_prefix(self, partition: int, job_id: str) -> bytes:
        return self.ckpt_prefix(partition) + job_id.encode() + b"/"

    def ckpt_key(self, partition: int, job_id: str, scheduled_ms: int) -> bytes:
        return _run_key(self.ckpt_prefix(partition), job_id.encode(), scheduled_ms)

    # -- executions -----------------------------------------------------------------------------
    def runs_all_prefix(self) -> bytes:
        return self.prefix + b"runs/"

    def runs_prefix(self, partition: int) -> bytes:
        return self.runs_all_prefix() + b"%04d/" % partition

    def runs_job_prefix(self, partition: int, job_id: str) -> bytes:
        return self.runs_prefix(partition) + job_id.encode() + b"/"

    def run_key(self, partition: int, job_id: str, scheduled_ms: int) -> bytes:
        return _run_key(self.runs_prefix(partition), job_id.encode(), scheduled_ms)

    def dlq_prefix(self, tenant: str | None = None, job_id: str | None = None) -> bytes:
        base = self.prefix + b"dlq/"
        if tenant is None:
            return base
        base += tenant.encode() + b"/"
        return base if job_id is None else base + job_id.encode() + b"/"

    def dlq_key(self, tenant: str, job_id: str, scheduled_ms: int) -> bytes:
        return self.dlq_prefix(tenant, job_id) + b"%013d" % scheduled_ms

    # -- dependencies ---------------------------------------------------------------------------
    def arrive_prefix(self, partition: int) -> bytes:
        return self.prefix + b"arrive/%04d/" % partition

    def arrive_all_prefix(self) -> bytes:
        return self.prefix + b"arrive/"

    def arrive_fire_prefix(self, partition: int, child: str, fire_ms: int) -> bytes:
        return self.arrive_prefix(partition) + child.encode() + b"/%013d/" % fire_ms

    def arrive_key(self, partition: int, child: str, fire_ms: int, parent: str) -> bytes:
        """How ``parent``'s execution for the root fire ``fire_ms`` ended, for ``child``."""
        return self.arrive_fire_prefix(partition, child, fire_ms) + parent.encode()

    def parse_arrive_key(self, key: bytes) -> tuple[int, str, int, str]:
        """``arrive/{p}/{child}/{T}/{parent}`` -> (partition, child, T, parent)."""
        rest = key[len(self.arrive_all_prefix()) :]
        p, child, fire, parent = rest.split(b"/", 3)
        return int(p), child.decode(), int(fire), parent.decode()

    def dskip_key(self, partition: int, child: str, fire_ms: int) -> bytes:
        """Set once ``child``'s execution for the root fire ``fire_ms`` was skipped."""
        return self.prefix + b"dskip/%04d/" % partition + child.encode() + b"/%013d" % fire_ms

    def partition_keys(self, partition: int) -> PartitionKeys:
        """The builders of one partition's keys, prefixes built once (the owner's hot path)."""
        return PartitionKeys(
            partition,
            self.jobs_prefix(),
            self.states_prefix(),
            self.due_prefix(partition),
            self.runs_prefix(partition),
        )


def _due_key(due_prefix: bytes, due_ms: int, jid: bytes) -> bytes:
    return due_prefix + b"%013d/" % due_ms + jid


def _run_due_key(due_prefix: bytes, due_ms: int, jid: bytes, scheduled_ms: int) -> bytes:
    return due_prefix + b"%013d/" % due_ms + jid + b"/%013d" % scheduled_ms


def _run_key(runs_prefix: bytes, jid: bytes, scheduled_ms: int) -> bytes:
    return runs_prefix + jid + b"/%013d" % scheduled_ms


@dataclass(frozen=True, slots=True)
class PartitionKeys:
    """Keys of one partition from job ids already encoded: what :class:`Keys` builds, cheaper.

    A claim builds several keys per job, thousands of jobs a second; these skip re-building
    the prefixes and re-encoding the id. ``pk.due_key(ms, jid) == keys.due_key(p, ms, id)``.
    """

    partition: int
    jobs: bytes
    states: bytes
    due: bytes
    runs: bytes

    def job_key(self, jid: bytes) -> bytes:
        return self.jobs + jid

    def state_key(self, jid: bytes) -> bytes:
        return self.states + jid

    def due_key(self, due_ms: int, jid: bytes) -> bytes:
        return _due_key(self.due, due_ms, jid)

    def run_due_key(self, due_ms: int, jid: bytes, scheduled_ms: int) -> bytes:
        return _run_due_key(self.due, due_ms, jid, scheduled_ms)

    def run_key(self, jid: bytes, scheduled_ms: int) -> bytes:
        return _run_key(self.runs, jid, scheduled_ms)

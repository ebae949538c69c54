"""The only code that talks to etcd: the :class:`~schedd.store.abc.KV` contract over ``etcd3aio``.

etcd3aio has defects we step around here once (see ../shared/LIBRARIES.md): endpoints must
be IPv4 literals (we resolve names), it retries DEADLINE_EXCEEDED on writes (we send writes
with one attempt; every write we make is guarded by a compare, so the caller re-reads and
retries), and a watch cancelled by compaction hangs (we raise :class:`WatchCompacted` so the
caller re-lists and re-watches). Swapping the client library means rewriting this folder only.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import grpc
import grpc.aio
from etcd3aio import Etcd3Client, EtcdError
from etcd3aio._protobuf import rpc_pb2  # type: ignore[attr-defined]

from schedd._errors import SchedError, Unavailable
from schedd.store._types import (
    KeyValue,
    RevisionCompacted,
    StoreWrites,
    WatchBatch,
    WatchCompacted,
    WatchEvent,
)
from schedd.store.abc import KV, KeyValueView, TxnRejected
from schedd.store.etcd._wire import EtcdOps, request, w_get

_RPC_ERRORS = (EtcdError, grpc.aio.AioRpcError, TimeoutError)


@dataclass(frozen=True)
class EtcdConfig:
    """How to reach etcd.

    Attributes:
        endpoints: ``host:port`` of every member; names are resolved to IPv4 at connect.
        ca_file: PEM CA bundle; enables TLS when set.
        cert_file: client certificate (mTLS), with ``key_file``.
        key_file: client private key (mTLS).
        server_name: the name the members' certificates are verified against. Needed with
            TLS and several endpoints (the client connects to resolved IPv4 addresses and has
            no one name to check); when absent and every endpoint names the same host, that
            host name is used; else the certificates must hold each member's IP address.
        timeout_s: deadline of one etcd call.

    Raises:
        ValueError: a client certificate without its key (or the reverse), or TLS settings
            without ``ca_file`` (naming the setting).
    """

    endpoints: tuple[str, ...] = ("127.0.0.1:2379",)
    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    server_name: str | None = None
    timeout_s: float = 5.0

    def __post_init__(self) -> None:
        if bool(self.cert_file) != bool(self.key_file):
            given, missing = ("cert_file", "key_file")
            if not self.cert_file:
                given, missing = missing, given
            raise ValueError(f"{given} needs {missing}: a client certificate goes with its key")
        if not self.ca_file:
            for name in ("cert_file", "server_name"):
                if getattr(self, name):
                    raise ValueError(f"{name} needs ca_file: TLS to etcd is on only with a CA")

    def tls_name(self) -> str | None:
        """The name to verify the members' certificates against (see ``server_name``)."""
        if self.server_name:
            return self.server_name
        hosts = {e.rpartition(":")[0].strip("[]") for e in self.endpoints}
        if len(hosts) == 1:
            (host,) = hosts
            if not _is_ip(host):
                return host
        return None

    @staticmethod
    def parse_endpoints(text: str) -> tuple[str, ...]:
        """``"a:2379,b:2379"`` -> ``("a:2379", "b:2379")``; rejects empty or portless items."""
        items = tuple(e.strip() for e in text.split(",") if e.strip())
        if not items:
            raise ValueError("no etcd endpoint given")
        for item in items:
            host, sep, port = item.removeprefix("http://").rpartition(":")
            if not sep or not host or not port.isdigit():
                raise ValueError(f"etcd endpoint {item!r} is not HOST:PORT")
        return tuple(e.removeprefix("http://") for e in items)


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def _resolve(endpoint: str) -> str:
    host, _, port = endpoint.rpartition(":")
    host = host.strip("[]")
    try:
        socket.inet_aton(host)
        return endpoint
    except OSError:
        pass
    infos = socket.getaddrinfo(host, int(port), socket.AF_INET, socket.SOCK_STREAM)
    return f"{infos[0][4][0]}:{port}"


def _kv(raw: Any) -> KeyValue:
    return KeyValue(
        key=raw.key,
        value=raw.value,
        create_revision=raw.create_revision,
        mod_revision=raw.mod_revision,
        version=raw.version,
        lease=raw.lease,
    )


def _details(exc: BaseException) -> str:
    return (exc.details() or "") if isinstance(exc, grpc.aio.AioRpcError) else str(exc)


def _unavailable(exc: BaseException, what: str) -> SchedError:
    """The contract's error for a failed call: mostly Unavailable (the outcome is unknown)."""
    details = _details(exc)
    if "duplicate key" in details:
        return TxnRejected(f"etcd {what} rejected: {details}")
    if "required revision has been compacted" in details:
        return RevisionCompacted(f"etcd {what} failed: {details}")
    if isinstance(exc, TimeoutError):  # its text is empty
        return Unavailable(f"etcd {what} failed: no answer within the call's deadline")
    return Unavailable(f"etcd {what} failed: {str(exc) or type(exc).__name__}")


class EtcdTxnResult:
    """A :class:`~schedd.store.abc.TxnResult` over etcd's protobuf ``TxnResponse``.

    Nothing is copied: accessors read the response where it lies, so a claim of 128 nested
    transactions costs 128 attribute reads, not 128 Python objects.
    """

    __slots__ = ("_resp", "_revision")

    def __init__(self, resp: Any, revision: int | None = None) -> None:
        self._resp = resp
        self._revision = revision

    @property
    def succeeded(self) -> bool:
        return bool(self._resp.succeeded)

    @property
    def revision(self) -> int:
        if self._revision is not None:
            return self._revision
        return int(self._resp.header.revision)

    def __len__(self) -> int:
        return len(self._resp.responses)

    def kvs(self, index: int) -> Sequence[KeyValueView]:
        return self._resp.responses[index].response_range.kvs  # type: ignore[no-any-return]

    def txn_succeeded(self, index: int) -> bool:
        return bool(self._resp.responses[index].response_txn.succeeded)

    def nested_outcomes(self) -> list[bool]:
        return [bool(r.response_txn.succeeded) for r in self._resp.responses]

    def nested(self, index: int) -> EtcdTxnResult:
        return EtcdTxnResult(self._resp.responses[index].response_txn, self.revision)


class EtcdKV:
    """The :class:`~schedd.store.abc.KV` contract on an etcd cluster. Open with :meth:`connect`.

    Deviations a caller might notice: etcd enforces a minimum lease TTL (about 2 s with
    default server settings): a shorter TTL is granted as that minimum.
    """

    ops = EtcdOps()

    def __init__(self, config: EtcdConfig, client: Etcd3Client) -> None:
        self.config = config
        self._client = client
        # KV.Txn taking a request already serialized (the wire builders), on the client's own
        # channel (same endpoints, balancing and TLS).
        channel = getattr(client, "_channel", None)
        self._txn_wire: Any = None
        if channel is not None:
            self._txn_wire = channel.unary_unary(
                "/etcdserverpb.KV/Txn",
                request_serializer=None,
                response_deserializer=rpc_pb2.TxnResponse.FromString,
            )

    @classmethod
    async def connect(cls, config: EtcdConfig) -> EtcdKV:
        endpoints = [_resolve(e) for e in config.endpoints]
        tls: dict[str, bytes | None] = {}
        server_name = None
        if config.ca_file:
            tls["ca_cert"] = Path(config.ca_file).read_bytes()
            server_name = config.tls_name()
            if config.cert_file and config.key_file:
                tls["cert_chain"] = Path(config.cert_file).read_bytes()
                tls["cert_key"] = Path(config.key_file).read_bytes()
        client = Etcd3Client(
            endpoints,
            rpc_max_attempts=3,
            tls_server_name=server_name,
            **tls,  # type: ignore[arg-type]
        )
        await client.connect()
        return cls(config, client)

    def writes(self) -> StoreWrites | None:
        """None: etcd counts what it writes itself (``etcd_mvcc_put_total``,
        ``etcd_disk_wal_write_bytes_total``)."""
        return None

    async def close(self) -> None:
        await self._client.close()

    @property
    def _kvs(self) -> Any:
        if self._client.kv is None:
            raise Unavailable("etcd client is closed")
        return self._client.kv

    # -- reads -------------------------------------------------------------------------------

    async def get(self, key: bytes) -> KeyValue | None:
        try:
            resp = await self._kvs.get(key, timeout=self.config.timeout_s)
        except _RPC_ERRORS as exc:
            raise _unavailable(exc, "get") from exc
        return _kv(resp.kvs[0]) if resp.kvs else None

    async def range(
        self,
        start: bytes,
        end: bytes,
        *,
        limit: int = 0,
        revision: int = 0,
        keys_only: bool = False,
    ) -> tuple[list[KeyValue], int, bool]:
        try:
            resp = await self._kvs.get(
                start,
                end,
                revision=revision,
                limit=limit,
                keys_only=keys_only,
                timeout=self.config.timeout_s,
            )
        except _RPC_ERRORS as exc:
            raise _unavailable(exc, "range") from exc
        return [_kv(k) for k in resp.kvs], resp.header.revision, bool(resp.more)

    async def range_all(
        self,
        start: bytes,
        end: bytes,
        *,
        page: int = 2000,
        revision: int = 0,
        keys_only: bool = False,
    ) -> tuple[list[KeyValue], int]:
        out: list[KeyValue] = []
        cursor = start
        while True:
            kvs, rev, more = await self.range(
                cursor, end, limit=page, revision=revision, keys_only=keys_only
            )
            if revision == 0:
                revision = rev
            out.extend(kvs)
            if not more or not kvs:
                return out, revision
            cursor = kvs[-1].key + b"\x00"

    async def get_many(self, keys: Sequence[bytes], *, per_txn: int = 128) -> list[KeyValue | None]:
        out: list[KeyValue | None] = []
        for i in range(0, len(keys), per_txn):
            resp = await self._send(b"".join([w_get(k) for k in keys[i : i + per_txn]]), None)
            out += [
                _kv(r.response_range.kvs[0]) if r.response_range.kvs else None
                for r in resp.responses
            ]
        return out

    async def count(self, start: bytes, end: bytes) -> int:
        try:
            resp = await self._kvs.get(start, end, count_only=True, timeout=self.config.timeout_s)
        except _RPC_ERRORS as exc:
            raise _unavailable(exc, "count") from exc
        return int(resp.count)

    # -- writes ------------------------------------------------------------------------------

    async def txn(
        self,
        compares: Sequence[object],
        success: Sequence[object],
        failure: Sequence[object] = (),
        *,
        timeout_s: float | None = None,
    ) -> EtcdTxnResult:
        """One transaction of ops from :attr:`ops` (wire bytes), sent once as a raw ``KV/Txn``."""
        body = request(compares, success, failure)
        return EtcdTxnResult(await self._send(body, timeout_s))

    async def _send(self, body: bytes, timeout_s: float | None) -> Any:
        timeout = timeout_s or self.config.timeout_s
        if self._client.kv is None:
            raise Unavailable("etcd client is closed")
        try:
            if self._txn_wire is None:  # a client without a reachable channel: the slow way
                req = rpc_pb2.TxnRequest.FromString(body)
                return await self._kvs.txn(
                    req.compare, req.success, req.failure, timeout=timeout, max_attempts=1
                )
            return await self._txn_wire(body, timeout=timeout)
        except _RPC_ERRORS as exc:
            raise _unavailable(exc, "txn") from exc

    async def put(self, key: bytes, value: bytes, *, lease: int = 0) -> int:
        try:
            resp = await self._kvs.put(
                key, value, lease=lease, timeout=self.config.timeout_s, max_attempts=1
            )
        except _RPC_ERRORS as exc:
            raise _unavailable(exc, "put") from exc
        return int(resp.header.revision)

    async def delete(self, key: bytes, end: bytes | None = None) -> int:
        try:
            resp = await self._kvs.delete(key, end, timeout=self.config.timeout_s, max_attempts=1)
        except _RPC_ERRORS as exc:
            raise _unavailable(exc, "delete") from exc
        return int(resp.deleted)

    async def compact(self, revision: int) -> None:
        try:
            await self._kvs.compact(revision, timeout=self.config.timeout_s)
        except grpc.aio.AioRpcError as exc:
            if "compacted" in (exc.details() or ""):
                return
            raise _unavailable(exc, "compact") from exc
        except (EtcdError, TimeoutError) as exc:
            raise _unavailable(exc, "compact") from exc

    # -- leases ------------------------------------------------------------------------------

    @property
    def _lease(self) -> Any:
        if self._client.lease is None:
            raise Unavailable("etcd client is closed")
        return self._client.lease

    async def grant(self, ttl_s: int) -> int:
        try:
            resp = await self._lease.grant(ttl_s, timeout=self.config.timeout_s)
        except _RPC_ERRORS as exc:
            raise _unavailable(exc, "lease grant") from exc
        return int(resp.ID)

    async def keepalive_once(self, lease_id: int) -> int:
        lease = self._lease
        try:
            async with asyncio.timeout(self.config.timeout_s):
                call = lease.keep_alive(lease_id)
                async for resp in call:
                    call.cancel()
                    return int(resp.TTL)
        except _RPC_ERRORS as exc:
            raise _unavailable(exc, "lease keep-alive") from exc
        return 0

    async def revoke(self, lease_id: int) -> None:
        lease = self._client.lease
        if lease is None:
            return
        try:
            await lease.revoke(lease_id, timeout=self.config.timeout_s, max_attempts=1)
        except _RPC_ERRORS as exc:
            if "lease not found" in _details(exc):
                return  # expired or revoked already: what the caller wanted
            raise _unavailable(exc, "lease revoke") from exc

    # -- watch -------------------------------------------------------------------------------

    async def watch(
        self, start: bytes, end: bytes, start_revision: int
    ) -> AsyncIterator[WatchBatch]:
        watch = self._client.watch
        if watch is None:
            raise Unavailable("etcd client is closed")
        try:
            async for resp in watch.watch(start, end, start_revision=start_revision):
                if resp.compact_revision > 0:
                    raise WatchCompacted(int(resp.compact_revision))
                if resp.canceled:
                    raise Unavailable(f"etcd watch cancelled: {resp.cancel_reason}")
                if not resp.events:
                    continue
                batch = WatchBatch(revision=int(resp.header.revision))
                for ev in resp.events:
                    kind = "delete" if ev.type == 1 else "put"
                    batch.events.append(WatchEvent(kind, _kv(ev.kv)))
                yield batch
        except (EtcdError, grpc.aio.AioRpcError) as exc:
            raise _unavailable(exc, "watch") from exc


async def connect_etcd(config: EtcdConfig) -> EtcdKV:
    """Opens the etcd backend of the store contract.

    Raises:
        Unavailable: no endpoint could be reached (etcd3aio may connect lazily: then the
            first call raises it).
    """
    return await EtcdKV.connect(config)


if TYPE_CHECKING:  # the type checker proves the backend meets the contract
    _contract: KV = EtcdKV(EtcdConfig(), Etcd3Client([]))

"""The only code that speaks etcd: a small async facade over ``etcd3aio``.

Why a facade: etcd3aio has defects we step around here once (see ../shared/LIBRARIES.md):
endpoints must be IPv4 literals (we resolve names), it retries DEADLINE_EXCEEDED on writes
(we send writes with one attempt; every write we make is guarded by a compare, so the caller
re-reads and retries), and a watch cancelled by compaction hangs (we raise
:class:`WatchCompacted` so the caller re-lists and re-watches). Swapping the client library
means rewriting this file only.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import grpc.aio
from etcd3aio import Etcd3Client, EtcdError, prefix_range_end
from etcd3aio._protobuf import rpc_pb2  # type: ignore[attr-defined]

from schedd._errors import Unavailable

Compare = rpc_pb2.Compare
RequestOp = rpc_pb2.RequestOp
TxnResponse = rpc_pb2.TxnResponse


@dataclass(frozen=True)
class EtcdConfig:
    """How to reach etcd.

    Attributes:
        endpoints: ``host:port`` of every member; names are resolved to IPv4 at connect.
        ca_file: PEM CA bundle; enables TLS when set.
        cert_file: client certificate (mTLS), with ``key_file``.
        key_file: client private key (mTLS).
        server_name: TLS name to verify when endpoints are IP literals.
        timeout_s: deadline of one etcd call.
    """

    endpoints: tuple[str, ...] = ("127.0.0.1:2379",)
    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    server_name: str | None = None
    timeout_s: float = 5.0

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


@dataclass(frozen=True)
class KeyValue:
    key: bytes
    value: bytes
    create_revision: int
    mod_revision: int
    version: int
    lease: int = 0


@dataclass(frozen=True)
class WatchEvent:
    """One change: ``kind`` is ``"put"`` or ``"delete"``; ``kv.value`` is empty on delete."""

    kind: str
    kv: KeyValue


@dataclass
class WatchBatch:
    revision: int
    events: list[WatchEvent] = field(default_factory=list)


class WatchCompacted(Exception):
    """The watch's start revision was compacted away: re-list, then watch from list rev + 1."""

    def __init__(self, compact_revision: int) -> None:
        super().__init__(f"watch start revision compacted (compact revision {compact_revision})")
        self.compact_revision = compact_revision


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


def _unavailable(exc: BaseException, what: str) -> Unavailable:
    return Unavailable(f"etcd {what} failed: {exc}")


class Etcd:
    """An open connection to an etcd cluster. Create with :meth:`connect`."""

    def __init__(self, config: EtcdConfig, client: Etcd3Client) -> None:
        self.config = config
        self._client = client
        # KV.Txn taking a request already serialized (see the wire builders below), on the
        # client's own channel (same endpoints, balancing and TLS).
        channel = getattr(client, "_channel", None)
        self._txn_wire: Any = None
        if channel is not None:
            self._txn_wire = channel.unary_unary(
                "/etcdserverpb.KV/Txn",
                request_serializer=None,
                response_deserializer=TxnResponse.FromString,
            )

    @classmethod
    async def connect(cls, config: EtcdConfig) -> Etcd:
        endpoints = [_resolve(e) for e in config.endpoints]
        tls: dict[str, bytes | None] = {}
        if config.ca_file:
            tls["ca_cert"] = Path(config.ca_file).read_bytes()
            if config.cert_file and config.key_file:
                tls["cert_chain"] = Path(config.cert_file).read_bytes()
                tls["cert_key"] = Path(config.key_file).read_bytes()
        client = Etcd3Client(
            endpoints,
            rpc_max_attempts=3,
            tls_server_name=config.server_name,
            **tls,  # type: ignore[arg-type]
        )
        await client.connect()
        return cls(config, client)

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
        except (EtcdError, grpc.aio.AioRpcError, TimeoutError) as exc:
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
        """Keys in ``[start, end)`` in key order: (kvs, header revision, more)."""
        try:
            resp = await self._kvs.get(
                start,
                end,
                revision=revision,
                limit=limit,
                keys_only=keys_only,
                timeout=self.config.timeout_s,
            )
        except (EtcdError, grpc.aio.AioRpcError, TimeoutError) as exc:
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
        """Every key in ``[start, end)``, paged, all read at one revision."""
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
        """The value of each key (None where absent), in order, many keys per round trip."""
        out: list[KeyValue | None] = []
        for i in range(0, len(keys), per_txn):
            resp = await self.txn_wire(b"".join([w_get(k) for k in keys[i : i + per_txn]]))
            out += [
                _kv(r.response_range.kvs[0]) if r.response_range.kvs else None
                for r in resp.responses
            ]
        return out

    async def count(self, start: bytes, end: bytes) -> int:
        try:
            resp = await self._kvs.get(start, end, count_only=True, timeout=self.config.timeout_s)
        except (EtcdError, grpc.aio.AioRpcError, TimeoutError) as exc:
            raise _unavailable(exc, "count") from exc
        return int(resp.count)

    # -- writes ------------------------------------------------------------------------------

    async def txn(
        self,
        compare: Sequence[Any],
        success: Sequence[Any],
        failure: Sequence[Any] = (),
        *,
        timeout_s: float | None = None,
    ) -> Any:
        """One transaction, sent once (never retried here: callers re-read and retry)."""
        try:
            return await self._kvs.txn(
                compare,
                success,
                failure,
                timeout=timeout_s or self.config.timeout_s,
                max_attempts=1,
            )
        except (EtcdError, grpc.aio.AioRpcError, TimeoutError) as exc:
            raise _unavailable(exc, "txn") from exc

    async def txn_wire(self, request: bytes, *, timeout_s: float | None = None) -> Any:
        """One transaction given as a serialized ``TxnRequest`` (the ``w_*`` fields, joined).

        The batched hot paths (claims, results) build their requests as bytes: far cheaper
        than protobuf objects copied into nested messages. Sent once, like :meth:`txn`.
        """
        timeout = timeout_s or self.config.timeout_s
        if self._client.kv is None:
            raise Unavailable("etcd client is closed")
        try:
            if self._txn_wire is None:  # a client without a reachable channel: the slow way
                req = rpc_pb2.TxnRequest.FromString(request)
                return await self._kvs.txn(
                    req.compare, req.success, req.failure, timeout=timeout, max_attempts=1
                )
            return await self._txn_wire(request, timeout=timeout)
        except (EtcdError, grpc.aio.AioRpcError, TimeoutError) as exc:
            raise _unavailable(exc, "txn") from exc

    async def put(self, key: bytes, value: bytes, *, lease: int = 0) -> int:
        """An unguarded put (for keys only this process writes); returns the revision."""
        try:
            resp = await self._kvs.put(
                key, value, lease=lease, timeout=self.config.timeout_s, max_attempts=1
            )
        except (EtcdError, grpc.aio.AioRpcError, TimeoutError) as exc:
            raise _unavailable(exc, "put") from exc
        return int(resp.header.revision)

    async def delete(self, key: bytes, end: bytes | None = None) -> int:
        try:
            resp = await self._kvs.delete(key, end, timeout=self.config.timeout_s, max_attempts=1)
        except (EtcdError, grpc.aio.AioRpcError, TimeoutError) as exc:
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

    async def grant(self, ttl_s: int) -> int:
        lease = self._client.lease
        if lease is None:
            raise Unavailable("etcd client is closed")
        try:
            resp = await lease.grant(ttl_s, timeout=self.config.timeout_s)
        except (EtcdError, grpc.aio.AioRpcError, TimeoutError) as exc:
            raise _unavailable(exc, "lease grant") from exc
        return int(resp.ID)

    async def keepalive_once(self, lease_id: int) -> int:
        """Refreshes the lease once; returns its TTL (<= 0: it expired)."""
        lease = self._client.lease
        if lease is None:
            raise Unavailable("etcd client is closed")
        try:
            async with asyncio.timeout(self.config.timeout_s):
                call = lease.keep_alive(lease_id)
                async for resp in call:
                    call.cancel()
                    return int(resp.TTL)
        except (EtcdError, grpc.aio.AioRpcError, TimeoutError) as exc:
            raise _unavailable(exc, "lease keep-alive") from exc
        return 0

    async def revoke(self, lease_id: int) -> None:
        lease = self._client.lease
        if lease is None:
            return
        try:
            await lease.revoke(lease_id, timeout=self.config.timeout_s, max_attempts=1)
        except (EtcdError, grpc.aio.AioRpcError, TimeoutError) as exc:
            raise _unavailable(exc, "lease revoke") from exc

    # -- watch -------------------------------------------------------------------------------

    async def watch(
        self, start: bytes, end: bytes, start_revision: int
    ) -> AsyncIterator[WatchBatch]:
        """Changes in ``[start, end)`` from ``start_revision`` on, a batch per etcd response.

        Raises:
            WatchCompacted: the start revision is compacted; re-list and watch again.
            Unavailable: the stream broke in a way etcd3aio does not recover from.
        """
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


# -- transaction building blocks (pure) ------------------------------------------------------


def prefix_end(prefix: bytes) -> bytes:
    return bytes(prefix_range_end(prefix))


def cmp_create(key: bytes, create_revision: int) -> Any:
    """True when the key's create revision equals this (0: the key does not exist)."""
    return Compare(
        result=Compare.EQUAL, target=Compare.CREATE, key=key, create_revision=create_revision
    )


def cmp_mod(key: bytes, mod_revision: int) -> Any:
    """True when the key was last written at this revision (0: the key does not exist)."""
    return Compare(result=Compare.EQUAL, target=Compare.MOD, key=key, mod_revision=mod_revision)


def op_put(key: bytes, value: bytes, lease: int = 0) -> Any:
    return RequestOp(request_put=rpc_pb2.PutRequest(key=key, value=value, lease=lease))


def op_delete(key: bytes, end: bytes = b"") -> Any:
    return RequestOp(request_delete_range=rpc_pb2.DeleteRangeRequest(key=key, range_end=end))


def op_get(key: bytes, end: bytes = b"") -> Any:
    return RequestOp(request_range=rpc_pb2.RangeRequest(key=key, range_end=end))


def op_txn(compare: Sequence[Any], success: Sequence[Any], failure: Sequence[Any] = ()) -> Any:
    """A nested transaction: lets one batch carry a separate compare per item."""
    return RequestOp(
        request_txn=rpc_pb2.TxnRequest(
            compare=list(compare), success=list(success), failure=list(failure)
        )
    )


def response_kvs(resp: Any, index: int) -> list[KeyValue]:
    """The kvs of the ``index``-th op's range response in a txn response."""
    return [_kv(k) for k in resp.responses[index].response_range.kvs]


# -- the same, as wire bytes (pure) ------------------------------------------------------------
#
# Each ``w_*`` returns one field of a ``TxnRequest``, serialized exactly as protobuf would
# (tests compare them byte for byte): ``w_cmp_*`` a ``compare`` entry, the others a ``success``
# entry. A request is the concatenation of its fields, compares first; a nested transaction
# (:func:`w_txn`) is a success entry holding such a concatenation. Fields are written in field
# number order and zeros are left out, except inside the Compare ``target_union`` oneof.

_LEN1 = [bytes((n,)) for n in range(128)]


def _varint(n: int) -> bytes:
    if n < 0x80:
        return _LEN1[n]
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _field(tag: bytes, body: bytes) -> bytes:
    """A length-delimited field: tag, length, body."""
    n = len(body)
    return tag + (_LEN1[n] if n < 0x80 else _varint(n)) + body


def w_cmp_create(key: bytes, create_revision: int) -> bytes:
    """Wire form of :func:`cmp_create`, as a ``TxnRequest.compare`` entry."""
    # target=CREATE (2: 1), key (3), create_revision (5, in the oneof: written even when 0)
    return _field(b"\x0a", _field(b"\x10\x01\x1a", key) + b"\x28" + _varint(create_revision))


def w_cmp_mod(key: bytes, mod_revision: int) -> bytes:
    """Wire form of :func:`cmp_mod`, as a ``TxnRequest.compare`` entry."""
    # target=MOD (2: 2), key (3), mod_revision (6, in the oneof: written even when 0)
    return _field(b"\x0a", _field(b"\x10\x02\x1a", key) + b"\x30" + _varint(mod_revision))


def w_put(key: bytes, value: bytes, lease: int = 0) -> bytes:
    """Wire form of :func:`op_put`, as a ``TxnRequest.success`` entry."""
    put = _field(b"\x0a", key)
    if value:
        put += _field(b"\x12", value)
    if lease:
        put += b"\x18" + _varint(lease)
    return _field(b"\x12", _field(b"\x12", put))  # success (2) <- RequestOp.request_put (2)


def w_delete(key: bytes, end: bytes = b"") -> bytes:
    """Wire form of :func:`op_delete`, as a ``TxnRequest.success`` entry."""
    body = _field(b"\x0a", key)
    if end:
        body += _field(b"\x12", end)
    return _field(b"\x12", _field(b"\x1a", body))  # <- RequestOp.request_delete_range (3)


def w_get(key: bytes, end: bytes = b"") -> bytes:
    """Wire form of :func:`op_get`, as a ``TxnRequest.success`` entry."""
    body = _field(b"\x0a", key)
    if end:
        body += _field(b"\x12", end)
    return _field(b"\x12", _field(b"\x0a", body))  # <- RequestOp.request_range (1)


def w_txn(compares: Sequence[bytes], success: Sequence[bytes]) -> bytes:
    """Wire form of :func:`op_txn` (no failure ops), as a ``TxnRequest.success`` entry."""
    return _field(b"\x12", _field(b"\x22", b"".join(compares) + b"".join(success)))

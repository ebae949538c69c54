"""The audit trail: one AuditEntry per mutation, in etcd under ``audit/``.

Keys are ``audit/{at_ms:013d}/{node}/{seq:08d}``, so key order is time order: a listing is a
range scan from its start instant, and pruning what is older than the retention is one range
delete (every node runs it; it is idempotent). The entry is written after the call, with its
outcome, before the answer goes back: a call that was answered has its entry.
"""

from __future__ import annotations

import base64
import logging

from schedd._clock import Clock
from schedd._errors import InvalidArgument, SchedError
from schedd.store import KV, Keys
from schedd.v1 import auth_pb2

log = logging.getLogger(__name__)

#: Keys read per round trip while filtering, and at most this many round trips per call (the
#: answer then carries a page token to go on from).
SCAN_PAGE = 1000
SCAN_ROUNDS = 20
_TOKEN_TAG = b"audit:"


def encode_page_token(key: bytes) -> str:
    return base64.urlsafe_b64encode(_TOKEN_TAG + key).decode().rstrip("=")


def decode_page_token(token: str, prefix: bytes) -> bytes | None:
    if not token:
        return None
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
    except ValueError:
        raw = b""
    if not raw.startswith(_TOKEN_TAG) or not raw[len(_TOKEN_TAG) :].startswith(prefix):
        raise InvalidArgument("page_token", "not a page token from a previous ListAudit answer")
    return raw[len(_TOKEN_TAG) :]


class AuditLog:
    """Writes, lists and prunes the audit trail.

    Args:
        retention_ms: entries older than this are deleted by :meth:`prune` (the history's).
    """

    def __init__(
        self, kv: KV, keys: Keys, node_id: str, clock: Clock, *, retention_ms: int
    ) -> None:
        self._kv = kv
        self._keys = keys
        self._node_id = node_id
        self._clock = clock
        self.retention_ms = retention_ms
        self._seq = 0

    async def record(self, entry: auth_pb2.AuditEntry) -> None:
        """Stores ``entry`` (its id, instant and node are set here). A store that cannot be
        reached is logged, not raised: the mutation it describes has happened already."""
        self._seq += 1
        entry.at_ms = entry.at_ms or self._clock.now_ms()
        entry.node_id = self._node_id
        key = self._keys.audit_key(entry.at_ms, self._node_id, self._seq)
        entry.id = key[len(self._keys.audit_prefix()) :].decode()
        try:
            await self._kv.put(key, entry.SerializeToString())
        except SchedError as exc:
            log.error(
                "audit: could not record %s by %s on %r: %s",
                entry.method, entry.actor, entry.target, exc,
            )  # fmt: skip

    async def list(
        self,
        *,
        tenant: str | None,
        since_ms: int = 0,
        until_ms: int = 0,
        actor: str = "",
        page_size: int = 100,
        page_token: str = "",
    ) -> tuple[list[auth_pb2.AuditEntry], str]:
        """Entries in time order from ``since_ms`` (a page, and the token of the next).

        Args:
            tenant: only this tenant's entries; None: every entry.
        """
        prefix = self._keys.audit_prefix()
        after = decode_page_token(page_token, prefix)
        start = after + b"\x00" if after is not None else prefix + b"%013d" % max(0, since_ms)
        end = prefix + b"%013d" % (until_ms or self._clock.now_ms() + 1)
        out: list[auth_pb2.AuditEntry] = []
        last = b""
        for _ in range(SCAN_ROUNDS):
            if start >= end:
                return out, ""
            kvs, _rev, more = await self._kv.range(start, end, limit=SCAN_PAGE)
            for kv in kvs:
                last = kv.key
                entry = auth_pb2.AuditEntry()
                try:
                    entry.ParseFromString(kv.value)
                except Exception:
                    continue
                if tenant is not None and entry.tenant != tenant:
                    continue
                if actor and entry.actor != actor:
                    continue
                out.append(entry)
                if len(out) >= page_size:
                    return out, encode_page_token(kv.key)
            if not more:
                return out, ""
            start = last + b"\x00"
        return out, encode_page_token(last)

    async def prune(self) -> int:
        """Deletes the entries older than the retention; returns how many."""
        prefix = self._keys.audit_prefix()
        cutoff = self._clock.now_ms() - self.retention_ms
        return await self._kv.delete(prefix, prefix + b"%013d" % max(0, cutoff))

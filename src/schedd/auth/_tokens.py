"""API tokens: made, stored hashed, checked and revoked.

A bearer string is ``sdt_<id>_<secret>``: the id is public (lists, the audit trail), the
secret is 32 random bytes (base64url) shown once. etcd keeps ``auth/tokens/{id}``, an ApiToken
protobuf with the SHA-256 of the secret: a fast hash is enough for a secret that cannot be
guessed, and reading etcd does not give a usable token.

Every node mirrors the prefix into a :class:`TokenRegistry`, so a check costs a dictionary
lookup and a hash, and a revocation reaches every node within the mirror's lag.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import logging
import secrets
from collections.abc import Awaitable, Callable

from schedd._errors import AlreadyExists, Conflict, InvalidArgument, NotFound, Unauthenticated
from schedd.auth._caller import ADMIN, ROLES, WORKER, Caller
from schedd.model import check_tenant, check_text
from schedd.store import KV, Keys, KeyValue, prefix_end
from schedd.v1 import auth_pb2

log = logging.getLogger(__name__)

PREFIX = "sdt_"
#: How long an unknown token id is remembered as unknown (a miss asks etcd once).
MISS_TTL_MS = 1000


def hash_secret(secret: str) -> bytes:
    return hashlib.sha256(secret.encode()).digest()


def split_bearer(value: str) -> tuple[str, str]:
    """``(id, secret)`` of a bearer string, with or without the ``Bearer `` scheme.

    Raises:
        Unauthenticated: it is not a schedd token.
    """
    text = value.strip()
    if text[:7].lower() == "bearer ":
        text = text[7:].strip()
    if not text.startswith(PREFIX):
        raise Unauthenticated("malformed token: a schedd token looks like sdt_<id>_<secret>")
    token_id, sep, secret = text[len(PREFIX) :].partition("_")
    if not sep or not token_id or not secret:
        raise Unauthenticated("malformed token: a schedd token looks like sdt_<id>_<secret>")
    return token_id, secret


def decode_token(value: bytes) -> auth_pb2.ApiToken | None:
    token = auth_pb2.ApiToken()
    try:
        token.ParseFromString(value)
    except Exception as exc:
        log.warning("ignoring an unreadable token record: %s", exc)
        return None
    return token if token.id else None


def public(token: auth_pb2.ApiToken) -> auth_pb2.ApiToken:
    """The token as callers see it: without the secret's hash."""
    out = auth_pb2.ApiToken()
    out.CopyFrom(token)
    out.ClearField("secret_hash")
    return out


def validate_new_token(token: auth_pb2.ApiToken, ttl_ms: int) -> auth_pb2.ApiToken:
    """The fields of a token to make, checked; errors name the field (``token.role`` ...)."""
    role = token.role or ""
    if role not in ROLES:
        raise InvalidArgument("token.role", f"must be one of {', '.join(ROLES)}, got {role!r}")
    out = auth_pb2.ApiToken(role=role)
    if role in (ADMIN, WORKER):
        if token.tenant:
            who = (
                "admin tokens act for every tenant"
                if role == ADMIN
                else ("worker tokens are limited with tenants, not tenant")
            )
            raise InvalidArgument("token.tenant", f"must be empty: {who}")
    else:
        out.tenant = check_tenant("token.tenant", token.tenant, required=True)
    if role != WORKER and (token.queues or token.tenants):
        field = "token.queues" if token.queues else "token.tenants"
        raise InvalidArgument(field, "only worker tokens are limited to queues and tenants")
    for n, q in enumerate(token.queues):
        out.queues.append(check_text(f"token.queues[{n}]", q, required=True))
    for n, t in enumerate(token.tenants):
        out.tenants.append(check_tenant(f"token.tenants[{n}]", t, required=True))
    if len(token.description.encode()) > 256:
        raise InvalidArgument("token.description", "at most 256 bytes")
    out.description = token.description
    if ttl_ms < 0:
        raise InvalidArgument("ttl_ms", f"must not be negative, got {ttl_ms}")
    return out


def caller_of(token: auth_pb2.ApiToken, peer: str = "") -> Caller:
    return Caller(
        actor=token.id,
        role=token.role,
        tenant=token.tenant,
        queues=frozenset(token.queues),
        tenants=frozenset(token.tenants),
        peer=peer,
    )


class TokenStore:
    """Tokens in etcd: make, read, list, revoke."""

    def __init__(self, kv: KV, keys: Keys) -> None:
        self._kv = kv
        self._keys = keys

    async def create(
        self, token: auth_pb2.ApiToken, ttl_ms: int, now_ms: int, created_by: str
    ) -> tuple[auth_pb2.ApiToken, str]:
        """Stores a new token (fields checked by :func:`validate_new_token`); returns it (no
        hash) and its bearer string, which exists nowhere else."""
        ops = self._kv.ops
        for _ in range(4):
            stored = auth_pb2.ApiToken()
            stored.CopyFrom(token)
            stored.id = secrets.token_hex(6)
            secret = secrets.token_urlsafe(32)
            stored.secret_hash = hash_secret(secret)
            stored.created_ms = now_ms
            stored.expires_ms = now_ms + ttl_ms if ttl_ms else 0
            stored.created_by = created_by
            key = self._keys.token_key(stored.id)
            result = await self._kv.txn(
                [ops.cmp_create(key, 0)], [ops.put(key, stored.SerializeToString())]
            )
            if result.succeeded:
                return stored, f"{PREFIX}{stored.id}_{secret}"
        raise AlreadyExists("could not find a free token id")  # 48 random bits, four times

    async def get(self, token_id: str) -> auth_pb2.ApiToken:
        kv = await self._kv.get(self._keys.token_key(token_id))
        token = decode_token(kv.value) if kv is not None else None
        if token is None:
            raise NotFound(f"token {token_id!r} not found")
        return token

    async def list(self) -> list[auth_pb2.ApiToken]:
        prefix = self._keys.tokens_prefix()
        kvs, _ = await self._kv.range_all(prefix, prefix_end(prefix))
        found = [t for t in (decode_token(kv.value) for kv in kvs) if t is not None]
        return sorted(found, key=lambda t: (t.tenant, t.created_ms, t.id))

    async def revoke(self, token_id: str, now_ms: int) -> auth_pb2.ApiToken:
        """Marks the token revoked (again: unchanged); the record stays for the audit trail."""
        key = self._keys.token_key(token_id)
        ops = self._kv.ops
        for _ in range(8):
            kv = await self._kv.get(key)
            token = decode_token(kv.value) if kv is not None else None
            if kv is None or token is None:
                raise NotFound(f"token {token_id!r} not found")
            if token.revoked_ms:
                return token
            token.revoked_ms = now_ms
            result = await self._kv.txn(
                [ops.cmp_mod(key, kv.mod_revision)], [ops.put(key, token.SerializeToString())]
            )
            if result.succeeded:
                return token
        raise Conflict(f"token {token_id!r} kept changing while being revoked; retry")


class TokenRegistry:
    """The tokens a node knows (mirrored from etcd), and the check of a bearer string.

    A token id the mirror does not have yet (made a moment ago through another node) is read
    from etcd once (``fetch``); unknown ids are then remembered for :data:`MISS_TTL_MS`, so
    guessing ids costs etcd at most one read per id per second.
    """

    def __init__(
        self,
        now_ms: Callable[[], int],
        fetch: Callable[[str], Awaitable[auth_pb2.ApiToken | None]] | None = None,
    ) -> None:
        self._now_ms = now_ms
        self._fetch = fetch
        self._tokens: dict[str, auth_pb2.ApiToken] = {}
        self._misses: dict[str, int] = {}
        self._fetching: dict[str, asyncio.Future[auth_pb2.ApiToken | None]] = {}

    def replace(self, kvs: list[KeyValue]) -> None:
        """The mirror's whole content (after a list or a watch batch)."""
        tokens = {}
        for kv in kvs:
            token = decode_token(kv.value)
            if token is not None:
                tokens[token.id] = token
        self._tokens = tokens
        self._misses.clear()

    def add(self, token: auth_pb2.ApiToken) -> None:
        self._tokens[token.id] = token
        self._misses.pop(token.id, None)

    def __len__(self) -> int:
        return len(self._tokens)

    def refused(self, token_id: str) -> bool:
        """Whether a token that was accepted before is no longer: revoked, expired or gone."""
        token = self._tokens.get(token_id)
        if token is None or token.revoked_ms:
            return True
        return bool(token.expires_ms) and token.expires_ms <= self._now_ms()

    async def _lookup(self, token_id: str) -> auth_pb2.ApiToken | None:
        token = self._tokens.get(token_id)
        if token is not None or self._fetch is None:
            return token
        now = self._now_ms()
        if self._misses.get(token_id, 0) > now:
            return None
        if len(self._misses) > 10_000:
            self._misses = {k: v for k, v in self._misses.items() if v > now}
        pending = self._fetching.get(token_id)
        if pending is None:
            pending = asyncio.ensure_future(self._fetch(token_id))
            self._fetching[token_id] = pending
            pending.add_done_callback(lambda _: self._fetching.pop(token_id, None))
        token = await asyncio.shield(pending)
        if token is None:
            self._misses[token_id] = now + MISS_TTL_MS
        else:
            self._tokens.setdefault(token.id, token)
        return token

    async def authenticate(self, bearer: str | None, peer: str = "") -> Caller:
        """The caller a bearer string stands for.

        Raises:
            Unauthenticated: none given, malformed, unknown, wrong secret, revoked or expired.
        """
        if not bearer:
            raise Unauthenticated("no credentials: send a token (authorization: Bearer sdt_...)")
        token_id, secret = split_bearer(bearer)
        token = await self._lookup(token_id)
        if token is None or not hmac.compare_digest(token.secret_hash, hash_secret(secret)):
            raise Unauthenticated(f"token {token_id} is not valid (unknown id or wrong secret)")
        if token.revoked_ms:
            raise Unauthenticated(f"token {token_id} was revoked")
        if token.expires_ms and token.expires_ms <= self._now_ms():
            raise Unauthenticated(f"token {token_id} has expired")
        return caller_of(token, peer)

"""The secret nodes present to each other on Peer calls (with auth on).

Peer calls read every tenant's executions, so with auth on they are refused without it. The
secret is made once, by the first node that needs it, and kept in etcd (``auth/peer-secret``):
every node can read etcd anyway, and a client that cannot read etcd cannot learn it.
"""

from __future__ import annotations

import hmac
import secrets

from schedd._errors import Unauthenticated
from schedd.store import KV, Keys


async def load_peer_secret(kv: KV, keys: Keys) -> str:
    """The cluster's peer secret, made now if no node made it yet."""
    key = keys.peer_secret_key()
    ops = kv.ops
    fresh = secrets.token_hex(32).encode()
    result = await kv.txn([ops.cmp_create(key, 0)], [ops.put(key, fresh)], [ops.get(key)])
    if result.succeeded:
        return fresh.decode()
    return bytes(result.kvs(0)[0].value).decode()


def check_peer(secret: str, presented: str | None) -> None:
    """Raises Unauthenticated unless ``presented`` is the cluster's peer secret."""
    if not presented or not hmac.compare_digest(secret.encode(), presented.encode()):
        raise Unauthenticated("peer calls need the cluster's peer secret (nodes only)")

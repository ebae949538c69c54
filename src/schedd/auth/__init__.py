"""Authentication and authorization: API tokens, roles and tenants, the audit trail, API
quotas, and the secret nodes present to each other."""

from schedd._metadata import AUTHORIZATION, PEER_METADATA, MetadataInterceptor
from schedd.auth._audit import AuditLog
from schedd.auth._caller import (
    ADMIN,
    ANONYMOUS,
    EDITOR,
    ROLES,
    VIEWER,
    WORKER,
    Caller,
    acting_as,
    current,
    worker_scope,
)
from schedd.auth._gate import MUTATIONS, ApiGate, ApiQuotas, note, request_tenant
from schedd.auth._peer import check_peer, load_peer_secret
from schedd.auth._tokens import (
    TokenRegistry,
    TokenStore,
    caller_of,
    decode_token,
    hash_secret,
    public,
    split_bearer,
    validate_new_token,
)

__all__ = [
    "ADMIN",
    "ANONYMOUS",
    "AUTHORIZATION",
    "EDITOR",
    "MUTATIONS",
    "PEER_METADATA",
    "ROLES",
    "VIEWER",
    "WORKER",
    "ApiGate",
    "ApiQuotas",
    "AuditLog",
    "Caller",
    "MetadataInterceptor",
    "TokenRegistry",
    "TokenStore",
    "acting_as",
    "caller_of",
    "check_peer",
    "current",
    "decode_token",
    "hash_secret",
    "load_peer_secret",
    "note",
    "public",
    "request_tenant",
    "split_bearer",
    "validate_new_token",
    "worker_scope",
]

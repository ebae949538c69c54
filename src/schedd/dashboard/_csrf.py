"""CSRF tokens of the dashboard's action forms.

A browser gets a random ``schedd_csrf`` cookie (SameSite=Strict, HttpOnly); each form carries
the HMAC of that cookie under a secret of the node's process. A POST is accepted only when its
form token is the HMAC of its own cookie: another site can neither read the cookie nor forge
the token, and a token stops working when the node restarts (a new secret).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets

COOKIE = "schedd_csrf"
FIELD = "csrf"


def new_secret() -> bytes:
    """A per-process secret."""
    return secrets.token_bytes(32)


def new_cookie() -> str:
    """A per-browser random value."""
    return secrets.token_urlsafe(24)


def token_for(secret: bytes, cookie: str) -> str:
    """The form token of a browser's cookie."""
    return hmac.new(secret, cookie.encode(), hashlib.sha256).hexdigest()


def check_token(secret: bytes, cookie: str | None, token: str | None) -> bool:
    """Whether ``token`` is the form token of ``cookie`` (both present, compared in constant
    time)."""
    if not cookie or not token:
        return False
    return hmac.compare_digest(token_for(secret, cookie), token)

"""Limits and checks for the small text and number fields of a job."""

from __future__ import annotations

import unicodedata

from schedd._errors import InvalidArgument

#: The largest payload a job may carry.
MAX_PAYLOAD_BYTES = 256 * 1024
#: The largest checkpoint a handler may save (encoded): it travels in heartbeats and is
#: written to etcd by the execution's owner.
MAX_CHECKPOINT_BYTES = 64 * 1024
#: The longest id, name, tenant, queue, handler name, idempotency key or label (UTF-8, NFC).
MAX_TEXT_BYTES = 200
#: Most attempts a retry policy may ask for.
MAX_ATTEMPTS = 100
#: Most labels on one job.
MAX_LABELS = 64
#: What an encrypted value starts with (``schedd.store._envelope.MAGIC``): no payload may.
SEALED_PREFIX = b"\x00SDE"


def _has_control(value: str) -> bool:
    return any(unicodedata.category(ch) in ("Cc", "Cf", "Zl", "Zp") for ch in value)


def check_text(field: str, value: str, *, required: bool = False, allow_slash: bool = False) -> str:
    """Normalise ``value`` to NFC and check it against the text limits.

    Args:
        field: Dotted field path named in the error.
        value: The text as given.
        required: Whether the empty string is refused.
        allow_slash: Whether ``'/'`` may appear (only for free text such as HTTP headers).

    Returns:
        The NFC-normalised text.

    Raises:
        InvalidArgument: Empty when required, longer than 200 bytes, containing ``'/'`` or a
            control character.
    """
    # ASCII (nearly every id and name) is its own NFC form, and its only control characters
    # are the ones str.isprintable() refuses: no per-character Unicode lookups for it.
    ascii_text = value.isascii()
    text = value if ascii_text else unicodedata.normalize("NFC", value)
    if not text:
        if required:
            raise InvalidArgument(field, "must not be empty")
        return text
    if len(text.encode()) > MAX_TEXT_BYTES:
        raise InvalidArgument(field, f"must be at most {MAX_TEXT_BYTES} bytes")
    if not allow_slash and "/" in text:
        raise InvalidArgument(field, "must not contain '/'")
    if (not text.isprintable()) if ascii_text else _has_control(text):
        raise InvalidArgument(field, "must not contain control characters")
    return text


def validate_id(field: str, value: str) -> str:
    """Check an id given to a lookup (GetJob, GetExecution, ...).

    Returns:
        The NFC-normalised id.

    Raises:
        InvalidArgument: The id is empty or breaks the text limits.
    """
    return check_text(field, value, required=True)


def check_non_negative(field: str, value: int) -> int:
    """Refuse a negative duration or count."""
    if value < 0:
        raise InvalidArgument(field, f"must not be negative (got {value})")
    return value


def check_payload(field: str, payload: bytes) -> bytes:
    """Refuse a payload above :data:`MAX_PAYLOAD_BYTES`, or one that would read as encrypted
    (it starts with :data:`SEALED_PREFIX`, a NUL and ``SDE``)."""
    if len(payload) > MAX_PAYLOAD_BYTES:
        raise InvalidArgument(
            field, f"is {len(payload)} bytes; at most {MAX_PAYLOAD_BYTES} bytes allowed"
        )
    if payload[:4] == SEALED_PREFIX:
        raise InvalidArgument(field, "must not start with the bytes \\x00SDE (encrypted values do)")
    return payload


def check_labels(field: str, labels: dict[str, str]) -> dict[str, str]:
    """Normalise and check label keys (required) and values (may be empty)."""
    if len(labels) > MAX_LABELS:
        raise InvalidArgument(field, f"at most {MAX_LABELS} labels allowed")
    out: dict[str, str] = {}
    for key in sorted(labels):
        norm_key = check_text(f"{field}.key", key, required=True)
        out[norm_key] = check_text(f"{field}[{norm_key}]", labels[key])
    return out

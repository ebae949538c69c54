"""Encryption at rest: the envelope a sealed value is stored in, and the keyring that opens it.

A sealed value (AES-256-GCM) is one byte string::

    \\x00SDE  version(1)  len(key id)(1)  key id  nonce(12)  ciphertext + tag(16)

Everything before the ciphertext is authenticated with it, together with a *context* the
caller names: the job id and the field (``j1\\x00job.payload``), so a value cannot be moved
into another job or another field (a payload into a header) without failing to open. A
value that does not start with the magic is plaintext, passed through as it is: records
written before encryption was turned on still read. No plaintext schedd stores starts with
``\\x00SDE`` (JSON never starts with NUL, nor does a protobuf message).

Text fields (HTTP header values, shell environment values) hold the envelope in base64
after ``\\x00SDE:``; the model refuses a NUL in those values, so plaintext never looks sealed.

The keyring is a text file, one key per line, the last one encrypting new values::

    # schedd encryption keys: <key id> <base64 of 32 random bytes>
    k2024 3Jm1U0cH8YVq6X0bqS7w6z0M1mD3m2kq7oZ1m8YlK0E=
    k2025 b8Gm0T6V2sPq1hLz9yXc4wR5tN7uJ3kA0eD2fH6iL8o=

``schedd keys generate`` makes a line. Key ids are 1 to 64 of ``A-Z a-z 0-9 . _ -``.
"""

from __future__ import annotations

import base64
import binascii
import logging
import os
import re
import stat
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from schedd._errors import EncryptionKeyError, Undecryptable

log = logging.getLogger(__name__)

MAGIC = b"\x00SDE"
#: The envelope version this code writes and reads.
VERSION = 1
#: Sealed text: this prefix, then the envelope in base64.
TEXT_MAGIC = "\x00SDE:"
NONCE_BYTES = 12
KEY_BYTES = 32
TAG_BYTES = 16
_KEY_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
#: A keyring re-reads its file for a key id it lacks at most this often (seconds).
RELOAD_INTERVAL_S = 5.0


def is_sealed(value: bytes) -> bool:
    """Whether ``value`` is an envelope (not plaintext)."""
    return value[:4] == MAGIC


def is_sealed_text(value: str) -> bool:
    return value[:5] == TEXT_MAGIC


def key_id_of(value: bytes) -> str:
    """The key id a sealed value names ("" when it is not a well-formed envelope)."""
    if len(value) < 7 or not is_sealed(value) or value[4] != VERSION:
        return ""
    n = value[5]
    return value[6 : 6 + n].decode("ascii", "replace")


def text_key_id_of(value: str) -> str:
    try:
        return key_id_of(base64.b64decode(value[5:], validate=True))
    except (binascii.Error, ValueError):
        return ""


@dataclass(frozen=True)
class EncryptionKey:
    """One AES-256 key and its id (the id travels in every value it seals)."""

    key_id: str
    secret: bytes

    def __post_init__(self) -> None:
        if not _KEY_ID.fullmatch(self.key_id):
            raise ValueError(f"key id {self.key_id!r}: use 1 to 64 of A-Z a-z 0-9 . _ -")
        if len(self.secret) != KEY_BYTES:
            raise ValueError(f"key {self.key_id!r}: {len(self.secret)} bytes, not {KEY_BYTES}")

    def __repr__(self) -> str:  # never the secret, in a log line or a traceback
        return f"EncryptionKey({self.key_id!r})"

    @staticmethod
    def generate(key_id: str) -> EncryptionKey:
        return EncryptionKey(key_id, os.urandom(KEY_BYTES))

    def line(self) -> str:
        """Its keyring file line: ``<key id> <base64>``."""
        return f"{self.key_id} {base64.b64encode(self.secret).decode()}"


class Keyring:
    """The keys this process knows; the last one (:attr:`active`) seals new values.

    A keyring read from a file (:meth:`from_file`) re-reads it, at most every few seconds,
    when asked for a key id it lacks: a key added to every node's file before a node starts
    writing with it is picked up by the nodes already running, for reading. The active key
    never changes that way; a process writes with the key that was newest when it started.
    """

    def __init__(
        self,
        keys: Sequence[EncryptionKey],
        *,
        source: Path | None = None,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        if not keys:
            raise EncryptionKeyError(f"{source or 'keyring'}: no keys")
        self.source = source
        self.active = keys[-1]
        self._keys: dict[str, EncryptionKey] = {}
        self._aead: dict[str, AESGCM] = {}
        self._add(keys)
        self._monotonic = monotonic
        self._last_reload = float("-inf")
        self._active_aead = self._aead[self.active.key_id]
        header = MAGIC + bytes([VERSION, len(self.active.key_id)]) + self.active.key_id.encode()
        self._active_header = header

    def _add(self, keys: Iterable[EncryptionKey]) -> None:
        for key in keys:
            known = self._keys.get(key.key_id)
            if known is not None:
                if known.secret != key.secret:
                    log.warning(
                        "keyring %s: key %r changed; keeping the one read first",
                        self.source, key.key_id,
                    )  # fmt: skip
                continue
            self._keys[key.key_id] = key
            self._aead[key.key_id] = AESGCM(key.secret)

    @classmethod
    def from_file(cls, path: Path) -> Keyring:
        """Reads a keyring file (see the module docstring).

        Warns when the file is readable by group or others (it holds the keys).

        Raises:
            EncryptionKeyError: it cannot be read, or a line is not ``<key id> <base64>``,
                or it holds no key, or an id twice.
        """
        return cls(read_keyring_file(path, warn=True), source=path)

    def ids(self) -> list[str]:
        return list(self._keys)

    def get(self, key_id: str) -> EncryptionKey | None:
        """The key with this id; a keyring from a file re-reads it first when it lacks it."""
        if key_id not in self._keys:
            self._reload()
        return self._keys.get(key_id)

    def _reload(self) -> None:
        now = self._monotonic()
        if self.source is None or now - self._last_reload < RELOAD_INTERVAL_S:
            return
        self._last_reload = now
        try:
            keys = read_keyring_file(self.source, warn=False)
        except EncryptionKeyError as exc:
            log.warning("keyring not re-read: %s", exc)
            return
        before = len(self._keys)
        self._add(keys)
        if len(self._keys) > before:
            log.info("keyring %s re-read: %d keys", self.source, len(self._keys))

    # -- sealing ----------------------------------------------------------------------------

    def seal(self, plaintext: bytes, context: bytes) -> bytes:
        """``plaintext`` sealed with the active key, bound to ``context``."""
        header = self._active_header + os.urandom(NONCE_BYTES)
        return header + self._active_aead.encrypt(
            header[-NONCE_BYTES:], plaintext, header + context
        )

    def seal_with(self, key_id: str, plaintext: bytes, context: bytes) -> bytes:
        """Like :meth:`seal`, with the key of this id (KeyError: none)."""
        aead = self._aead[key_id]
        header = MAGIC + bytes([VERSION, len(key_id)]) + key_id.encode() + os.urandom(NONCE_BYTES)
        return header + aead.encrypt(header[-NONCE_BYTES:], plaintext, header + context)

    def open(self, value: bytes, context: bytes, what: str) -> bytes:
        """The plaintext of a sealed ``value`` (plaintext is returned as it is).

        Raises:
            Undecryptable: the key it names is not in this keyring, or it does not open with
                that key and ``context`` (another key of the same id, another field or job,
                or changed bytes). ``what`` names the value in the message.
        """
        if not is_sealed(value):
            return value
        key_id = key_id_of(value)
        if not key_id:
            raise Undecryptable(what, "", "not a valid envelope (unknown version or truncated)")
        aead = self._aead.get(key_id)
        if aead is None:
            if self.get(key_id) is None:
                raise Undecryptable(
                    what, key_id, f"encrypted with key {key_id!r}, which is not in this keyring"
                )
            aead = self._aead[key_id]
        end = 6 + len(key_id) + NONCE_BYTES
        if len(value) < end + TAG_BYTES:
            raise Undecryptable(what, key_id, "truncated envelope")
        header = value[:end]
        try:
            return aead.decrypt(header[-NONCE_BYTES:], value[end:], header + context)
        except InvalidTag:
            raise Undecryptable(
                what,
                key_id,
                f"does not decrypt with key {key_id!r} (another key of that id, or the value was"
                " changed or moved from another job or field)",
            ) from None


def no_keyring(value: bytes, what: str) -> Undecryptable:
    """The error for a sealed value met by a process without a keyring."""
    key_id = key_id_of(value)
    return Undecryptable(
        what, key_id, f"encrypted with key {key_id!r}, and this process has no keyring"
    )


def read_keyring_file(path: Path, *, warn: bool) -> list[EncryptionKey]:
    """The keys of a keyring file, in file order (see the module docstring).

    Raises:
        EncryptionKeyError: unreadable, a bad line (its number, never its content), no key,
            or an id twice.
    """
    try:
        text = path.read_text()
        mode = path.stat().st_mode
    except OSError as exc:
        raise EncryptionKeyError(f"keyring {path}: {exc.strerror or exc}") from exc
    if warn and mode & (stat.S_IRWXG | stat.S_IRWXO):
        log.warning(
            "keyring %s can be read by group or others (mode %04o): chmod 600 it",
            path, stat.S_IMODE(mode),
        )  # fmt: skip
    keys: list[EncryptionKey] = []
    seen: set[str] = set()
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        parts = line.split()
        where = f"keyring {path}, line {number}"
        if len(parts) != 2:
            raise EncryptionKeyError(f"{where}: expected '<key id> <base64 of 32 bytes>'")
        try:
            secret = base64.b64decode(parts[1], validate=True)
        except binascii.Error:
            raise EncryptionKeyError(f"{where}: the key is not base64") from None
        try:
            key = EncryptionKey(parts[0], secret)
        except ValueError as exc:  # names the id and the length, never the key
            raise EncryptionKeyError(f"{where}: {exc}") from None
        if key.key_id in seen:
            raise EncryptionKeyError(f"keyring {path}, line {number}: key {key.key_id!r} twice")
        seen.add(key.key_id)
        keys.append(key)
    if not keys:
        raise EncryptionKeyError(f"keyring {path}: no keys")
    return keys

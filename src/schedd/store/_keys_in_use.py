"""The cluster's record of its encryption keys, ``meta/encryption``, and the check at start.

The record names every key id the cluster's records may be encrypted with, each with a
*canary*: a known text sealed with that key. A process that holds a key of that id can tell
whether it is the right key (the canary opens) before it reads or writes anything::

    {"keys": {"k2024": "<base64 of the sealed canary>", "k2025": "..."}}

A node checks its keyring against the record at start (:func:`prepare_keyring`): with no
record, encryption is not in use; with one, the node needs every key it names, each opening
its canary. Then it adds its own active key (compare-and-swap), so that no process can start
later without it. ``schedd keys rekey`` removes the ids no record uses any more.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Iterable
from dataclasses import dataclass, field

from schedd._errors import Conflict, EncryptionKeyError, FailedPrecondition, Undecryptable
from schedd.store._envelope import Keyring
from schedd.store._keys import Keys
from schedd.store.abc import KV

CANARY = b"schedd encryption canary"
#: The flag (and environment variable) that gives a node or a command its keyring.
KEYRING_FLAG = "--encryption-keys FILE (or SCHEDD_ENCRYPTION_KEYS)"


def _canary_context(key_id: str) -> bytes:
    return b"\x00canary\x00" + key_id.encode()


@dataclass(frozen=True)
class KeysInUse:
    """What ``meta/encryption`` holds.

    Attributes:
        canaries: key id -> its sealed canary, in the order the ids were added.
        revision: the record's mod revision (0: there is none; encryption is not in use).
    """

    canaries: dict[str, bytes] = field(default_factory=dict)
    revision: int = 0

    def ids(self) -> list[str]:
        return list(self.canaries)

    def to_json(self) -> bytes:
        keys = {k: base64.b64encode(v).decode() for k, v in self.canaries.items()}
        return json.dumps({"keys": keys}).encode()

    @staticmethod
    def from_json(raw: bytes, revision: int) -> KeysInUse:
        try:
            keys = json.loads(raw)["keys"]
            canaries = {str(k): base64.b64decode(v, validate=True) for k, v in keys.items()}
        except (ValueError, KeyError, TypeError, AttributeError, binascii.Error) as exc:
            raise FailedPrecondition(f"meta/encryption is not a keys record: {raw!r}") from exc
        return KeysInUse(canaries, revision)


async def read_keys_in_use(kv: KV, keys: Keys) -> KeysInUse:
    found = await kv.get(keys.encryption_key())
    return KeysInUse() if found is None else KeysInUse.from_json(found.value, found.mod_revision)


def check_keyring(in_use: KeysInUse, keyring: Keyring | None) -> None:
    """Whether ``keyring`` opens every record the cluster may hold.

    Raises:
        EncryptionKeyError: one line naming the key id, what is wrong and the flag: records
            are encrypted and there is no keyring, a key id in use is not in it, or its key
            of that id does not open the canary (another key under the same id).
    """
    ids = in_use.ids()
    if not ids:
        return
    if keyring is None:
        raise EncryptionKeyError(
            f"the cluster's records are encrypted (key {_names(ids)}) and no keyring was"
            f" given: give it with {KEYRING_FLAG}"
        )
    where = f"the keyring {keyring.source}" if keyring.source else "the keyring"
    for key_id, canary in in_use.canaries.items():
        if keyring.get(key_id) is None:
            raise EncryptionKeyError(
                f"the cluster's records are encrypted with key {key_id!r}, which is not in"
                f" {where}: add it to the file given with {KEYRING_FLAG}"
            )
        try:
            opened = keyring.open(canary, _canary_context(key_id), f"key {key_id!r} canary")
        except Undecryptable:
            opened = b""
        if opened != CANARY:
            raise EncryptionKeyError(
                f"key {key_id!r} in {where} is not the key the cluster's records are encrypted"
                f" with (its canary does not decrypt): fix the file given with {KEYRING_FLAG}"
            )


def _names(ids: Iterable[str]) -> str:
    return ", ".join(repr(i) for i in ids)


async def prepare_keyring(kv: KV, keys: Keys, keyring: Keyring | None) -> KeysInUse:
    """Checks ``keyring`` against the cluster's record, then adds its active key to it.

    Call before reading or writing any record. With no keyring and no record, nothing is
    encrypted and nothing changes.

    Raises:
        EncryptionKeyError: see :func:`check_keyring`.
        Conflict: the record kept changing under the compare-and-swap.
    """
    for _ in range(10):
        in_use = await read_keys_in_use(kv, keys)
        check_keyring(in_use, keyring)
        if keyring is None or keyring.active.key_id in in_use.canaries:
            return in_use
        canaries = dict(in_use.canaries)
        active = keyring.active.key_id
        canaries[active] = keyring.seal_with(active, CANARY, _canary_context(active))
        written = await write_keys_in_use(kv, keys, KeysInUse(canaries), in_use.revision)
        if written is not None:
            return written
    raise Conflict("meta/encryption kept changing; retry")


async def write_keys_in_use(
    kv: KV, keys: Keys, record: KeysInUse, expected_revision: int
) -> KeysInUse | None:
    """Writes ``record`` if the stored one is still at ``expected_revision`` (0: none);
    returns it with its new revision, or None when the compare failed."""
    key, ops = keys.encryption_key(), kv.ops
    compare = ops.cmp_mod(key, expected_revision) if expected_revision else ops.cmp_create(key, 0)
    resp = await kv.txn([compare], [ops.put(key, record.to_json())])
    if not resp.succeeded:
        return None
    return KeysInUse(record.canaries, resp.revision)

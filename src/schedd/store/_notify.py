"""The notify format: what ``notify/{p}`` tells a partition's owner about API changes.

Written by the client API's transactions (:func:`notify_ops`, from :mod:`schedd.store._jobs`
and its create and dead-letter paths) in the same transaction as the change; read by every
node's watch of ``notify/``. The value is JSON::

    {"u": ["j-a", ...], "c": [["j-b", due_ms, scheduled_ms], ...]}

``u``: jobs changed (updated, paused, resumed, deleted, triggered, redriven): re-read them.
``c``: jobs created, with their first due entry, so the owner adds it without reading
anything (the entry's mod revision is the notify event's). ``*`` instead of JSON: too many
changes to list; the owner reloads its whole window.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field

from schedd.store._keys import Keys
from schedd.store._records import FIRE, DueEntry
from schedd.store.abc import Op, OpBuilder

#: A notice listing more changed ids than this says "everything" instead.
NOTIFY_MAX_IDS = 200
_EVERYTHING = b"*"


@dataclass(frozen=True)
class Notice:
    """One write of ``notify/{p}``."""

    changed: Sequence[str] = ()
    created: Sequence[tuple[str, int, int]] = field(default_factory=list)
    #: Too much changed to list: the owner re-reads its whole window.
    everything: bool = False

    def encode(self) -> bytes:
        if self.everything or len(self.changed) > NOTIFY_MAX_IDS:
            return _EVERYTHING
        body = {"u": list(self.changed), "c": [list(c) for c in self.created]}
        return json.dumps(body, separators=(",", ":")).encode()

    @staticmethod
    def decode(value: bytes) -> Notice:
        """The notice in a stored value; raises ValueError for one that is not a notice."""
        if value == _EVERYTHING:
            return Notice(everything=True)
        body = json.loads(value)
        if not isinstance(body, dict):
            raise ValueError(f"not a notify value: {value[:80]!r}")
        created = [(str(j), int(d), int(s)) for j, d, s in body.get("c", [])]
        return Notice([str(j) for j in body.get("u", [])], created)

    def created_entries(self, partition: int, revision: int) -> list[DueEntry]:
        """The first due entries of the created jobs, as the owner keeps them."""
        return [
            DueEntry(partition, due, job, FIRE, sched, revision) for job, due, sched in self.created
        ]


def notify_ops(
    ops: OpBuilder,
    keys: Keys,
    changed: dict[int, list[str]],
    created: dict[int, list[tuple[str, int, int]]] | None = None,
) -> list[Op]:
    """Puts ``notify/{p}`` for every partition touched (the format: :class:`Notice`).

    ``changed``: partition -> ids of jobs changed; ``created``: partition -> (job id, due ms,
    scheduled ms) of jobs created, as :class:`Notice` lists them.
    """
    created = created or {}
    return [
        ops.put(keys.notify_key(p), Notice(changed.get(p, []), created.get(p, [])).encode())
        for p in sorted(set(changed) | set(created))
    ]

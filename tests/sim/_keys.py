"""The simulation's key layout: the cluster's keys under ``/sim/``, and the workload's."""

from __future__ import annotations

from schedd.store import Keys

KEYS = Keys(b"/sim/")
LEDGER_PREFIX = b"/sim/ledger/"
FIRES_PREFIX = b"/sim/fires/"


def ledger_key(partition: int, node_id: str, seq: int) -> bytes:
    """A fresh key per ledger write: ``ledger/{p}/{node}/{seq}`` (value: the epoch)."""
    return LEDGER_PREFIX + b"%04d/%s/%d" % (partition, node_id.encode(), seq)


def parse_ledger_key(key: bytes) -> int:
    """The partition of a ledger key."""
    return int(key[len(LEDGER_PREFIX) : len(LEDGER_PREFIX) + 4])


def cursor_key(partition: int) -> bytes:
    """The next fire of the partition's job to claim (value: its index)."""
    return FIRES_PREFIX + b"%04d/cursor" % partition


def runs_prefix(partition: int) -> bytes:
    return FIRES_PREFIX + b"%04d/run/" % partition


def run_key(partition: int, fire: int) -> bytes:
    """A live execution of fire ``fire``; its mod revision is the execution's token."""
    return runs_prefix(partition) + b"%06d" % fire


def done_key(partition: int, fire: int) -> bytes:
    """A finished execution (value: the token its result was accepted under)."""
    return FIRES_PREFIX + b"%04d/done/%06d" % (partition, fire)


def parse_fire_key(key: bytes) -> tuple[int, int]:
    """(partition, fire) of a run or done key."""
    rest = key[len(FIRES_PREFIX) :]
    return int(rest[:4]), int(rest.rsplit(b"/", 1)[1])

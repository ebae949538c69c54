"""Executions that must not be dispatched: a value they would carry is still encrypted.

A partition owner reads leniently (``store.Sealer``): a value that does not decrypt on this
node (changed in etcd, or under a key this node lacks) stays encrypted in memory instead of
stopping the partition. Nothing encrypted may reach a worker, which would get ciphertext for
its payload, checkpoint, header or environment: the :class:`~._fire_policy.FirePolicy`
splits such executions off (:func:`split_sealed`) and the partition ends them as dead letters
(:func:`refusal`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from schedd.node._live import Live
from schedd.store import Sealer, StoredJob
from schedd.v1 import execution_pb2

#: The reason of such a dead letter (its error names the field and the key).
REFUSED_REASON = "not dispatched: a value does not decrypt on this node"


def split_sealed(
    sealer: Sealer, jobs: Mapping[str, StoredJob], lives: Sequence[Live]
) -> tuple[list[Live], list[tuple[Live, str]]]:
    """(what may be dispatched, what may not with why). What decrypts now (its key came
    since: a keyring re-reads its file) is decrypted in place, and its message dropped, to
    be built again from the plaintext."""
    ok: list[Live] = []
    refused: list[tuple[Live, str]] = []
    for live in lives:
        cached = jobs.get(live.ex.job_id)
        found, problem = sealer.reopen(cached.job if cached else None, live.ex)
        if found:
            live.message = None
        if problem:
            refused.append((live, problem))
        else:
            ok.append(live)
    return ok, refused


def refusal(ex: execution_pb2.Execution, problem: str, now: int) -> execution_pb2.Execution:
    """The dead letter of an execution refused for ``problem`` (redrive it once the key is
    there)."""
    dead = execution_pb2.Execution()
    dead.CopyFrom(ex)
    dead.state = execution_pb2.EXECUTION_DEAD
    dead.reason = REFUSED_REASON
    dead.error = problem
    dead.finished_ms = now
    return dead

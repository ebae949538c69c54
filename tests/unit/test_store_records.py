"""Stored record formats stay readable across the claim path's cheaper encoders."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from schedd.history import History
from schedd.store import (
    FIRE,
    RUN,
    DueEntry,
    JobState,
    Keys,
    decode_execution,
    encode_execution,
    execution_from,
    execution_template,
    new_execution,
)
from schedd.v1 import execution_pb2, job_pb2

millis = st.integers(min_value=0, max_value=9_999_999_999_999)


@given(millis, millis, millis)
def test_job_state_is_the_json_it_always_was(due: int, nxt: int, last: int) -> None:
    encoded = JobState(due, nxt, last).encode()
    assert encoded == json.dumps([due, nxt, last]).encode()  # what older nodes wrote and read
    assert JobState.decode(encoded) == JobState(due, nxt, last)
    assert JobState.decode(b"[1,2,3]") == JobState(1, 2, 3)  # compact JSON reads too


@given(st.sampled_from([FIRE, RUN]), millis)
def test_due_entry_value(kind: str, sched: int) -> None:
    value = DueEntry.encode_value(kind, sched)
    assert value == f"{kind}{sched}".encode()
    assert DueEntry(0, 1, "j", kind, sched).encode() == value
    # A RUN entry's key names its execution; one read from a key that does not was written
    # by a node of key format 1, and is consumed at that key.
    key_sched = 0 if kind == FIRE else sched + 1
    assert DueEntry.decode(0, 1, "j", value, 5, key_sched) == DueEntry(0, 1, "j", kind, sched, 5)
    legacy = DueEntry.decode(0, 1, "j", value, 5)
    assert legacy.legacy_key == (kind == RUN)
    assert legacy.names_execution is False


def test_encode_execution_leaves_the_token_out_and_the_execution_alone() -> None:
    ex = execution_pb2.Execution(id="j@1", job_id="j", scheduled_ms=1, fencing_token=42)
    value = encode_execution(ex)
    assert ex.fencing_token == 42
    assert execution_pb2.Execution.FromString(value).fencing_token == 0
    assert decode_execution(value, 77) == execution_pb2.Execution(
        id="j@1", job_id="j", scheduled_ms=1, fencing_token=77
    )


def _jobs() -> list[job_pb2.Job]:
    return [
        job_pb2.Job(id="j-1", tenant="acme", handler=job_pb2.HandlerTarget(name="h", queue="q")),
        job_pb2.Job(
            id="j-2",
            tenant="acme",
            http=job_pb2.HttpTarget(url="http://x"),
            retry=job_pb2.RetryPolicy(max_attempts=7),
        ),
        job_pb2.Job(id="j-3", shell=job_pb2.ShellTarget(argv=["true"])),
    ]


@pytest.mark.parametrize("job", _jobs())
@pytest.mark.parametrize(
    "trigger", [execution_pb2.TRIGGER_SCHEDULE, execution_pb2.TRIGGER_CATCH_UP]
)
def test_execution_from_template_is_new_execution(job: job_pb2.Job, trigger: int) -> None:
    template = execution_template(job, 9)
    got = execution_from(template, 1_700_000_000_000, 1_700_000_000_250, trigger)
    assert got == new_execution(job, 9, 1_700_000_000_000, 1_700_000_000_250, trigger)
    assert template.id == "" and template.scheduled_ms == 0  # the template is not changed


def test_history_records_a_batch_in_one_write_and_lists_it(tmp_path: Path) -> None:
    history = History(tmp_path / "h")
    history.record([])  # nothing to write: no empty write
    done = []
    for i in range(300):
        ex = execution_pb2.Execution(
            id=f"j{i % 3}@{1000 + i}",
            job_id=f"j{i % 3}",
            scheduled_ms=1000 + i,
            finished_ms=5000 + i,
            state=execution_pb2.EXECUTION_SUCCEEDED,
            fencing_token=10 + i,
        )
        done.append(ex)
    history.record(done)
    assert history.get("j1@1001") == done[1]
    per_job = history.list(job_id="j2", limit=1000)
    assert [e.scheduled_ms for e in per_job] == sorted(
        (e.scheduled_ms for e in done if e.job_id == "j2"), reverse=True
    )
    assert [e.id for e in history.list(limit=3)] == ["j2@1299", "j1@1298", "j0@1297"]
    assert history.prune(now_ms=5000 + 150 + history.ttl_ms) == 150
    assert history.get("j0@1000") is None and history.get("j0@1150") is not None
    history.close()


job_ids = st.text(min_size=1, max_size=40).filter(lambda t: "/" not in t)  # as check_text


@given(st.integers(min_value=0, max_value=9999), millis, job_ids, millis)
def test_partition_keys_build_what_keys_build(
    partition: int, ms: int, job_id: str, sched: int
) -> None:
    keys = Keys(b"/p/")
    pk, jid = keys.partition_keys(partition), job_id.encode()
    assert pk.job_key(jid) == keys.job_key(job_id)
    assert pk.state_key(jid) == keys.state_key(job_id)
    assert pk.due_key(ms, jid) == keys.due_key(partition, ms, job_id)
    assert pk.run_key(jid, ms) == keys.run_key(partition, job_id, ms)
    assert keys.parse_due_key(pk.due_key(ms, jid)) == (partition, ms, job_id, 0)
    run_due = pk.run_due_key(ms, jid, sched)
    assert run_due == keys.run_due_key(partition, ms, job_id, sched)
    assert keys.parse_due_key(run_due) == (partition, ms, job_id, sched)
    # Two executions of one job due at one instant: two keys, and neither is the job's
    # FIRE key at that instant.
    assert len({run_due, pk.run_due_key(ms, jid, sched + 1), pk.due_key(ms, jid)}) == 3

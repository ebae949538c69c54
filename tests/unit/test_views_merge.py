"""Merging the nodes' parts of a cluster-wide view: page tokens, the most advanced copy of an
execution, keyset pages over parts that overlap, workers connected to several nodes."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from schedd._errors import InvalidArgument
from schedd.history import Position, comes_after
from schedd.node._views import (
    advancement,
    cut_page,
    decode_page_token,
    encode_page_token,
    merge_executions,
    merge_workers,
)
from schedd.v1 import execution_pb2, scheduler_pb2

E = execution_pb2


def _ex(
    job: str, sched: int, state: int = E.EXECUTION_SUCCEEDED, token: int = 1, attempt: int = 1
) -> E.Execution:
    return E.Execution(
        id=f"{job}@{sched}",
        job_id=job,
        scheduled_ms=sched,
        state=state,  # type: ignore[arg-type]
        fencing_token=token,
        attempt=attempt,
    )


def test_a_token_names_the_last_position() -> None:
    pos = Position(1_700_000_000_123, "job:with/odd@chars@1700000000123")
    assert decode_page_token(encode_page_token(pos)) == pos
    assert decode_page_token("") is None


@pytest.mark.parametrize(
    "token", ["12", "not a token!", "cjE6", "cjE6eDp5", "eDox", "%%%", "cjE6MTI6"]
)
def test_a_malformed_token_is_invalid_argument_on_page_token(token: str) -> None:
    with pytest.raises(InvalidArgument) as info:
        decode_page_token(token)
    assert info.value.field == "page_token"


def test_the_most_advanced_copy_wins() -> None:
    pending = _ex("a", 1, E.EXECUTION_PENDING, token=5)
    running = _ex("a", 1, E.EXECUTION_RUNNING, token=5)  # the owner's memory
    done = _ex("a", 1, E.EXECUTION_SUCCEEDED, token=5)  # its history
    assert max([pending, running], key=advancement) is running
    assert max([running, done, pending], key=advancement) is done
    # A dead letter redriven: a later attempt, alive again, beats the old final state.
    dead = _ex("a", 1, E.EXECUTION_DEAD, token=5, attempt=3)
    redriven = _ex("a", 1, E.EXECUTION_PENDING, token=9, attempt=4)
    assert max([dead, redriven], key=advancement) is redriven
    # A re-tokened copy (a new owner) beats what the old owner still had in memory.
    old = _ex("a", 1, E.EXECUTION_RUNNING, token=5)
    new = _ex("a", 1, E.EXECUTION_PENDING, token=7)
    assert max([old, new], key=advancement) is new


def test_merge_deduplicates_and_orders() -> None:
    n1 = [_ex("b", 10), _ex("a", 5, E.EXECUTION_RUNNING, token=3)]
    n2 = [_ex("a", 5, E.EXECUTION_SUCCEEDED, token=3), _ex("a", 10), _ex("c", 7)]
    merged = merge_executions([n1, n2])
    assert [e.id for e in merged] == ["a@10", "b@10", "c@7", "a@5"]
    assert merged[-1].state == E.EXECUTION_SUCCEEDED


def test_cut_page_gives_a_token_only_when_more_may_follow() -> None:
    rows = [_ex("a", s) for s in (3, 2, 1)]
    page, token = cut_page(rows, 2, more=False)
    assert [e.id for e in page] == ["a@3", "a@2"]
    assert decode_page_token(token) == Position(2, "a@2")
    assert cut_page(rows, 3, more=False)[1] == ""
    assert cut_page(rows, 3, more=True)[1] != ""  # a part was cut at 3: look again
    assert cut_page([], 3, more=True) == ([], "")


@given(
    parts=st.lists(
        st.lists(st.tuples(st.sampled_from("abc"), st.integers(0, 8)), max_size=12), max_size=4
    ),
    size=st.integers(1, 5),
)
def test_keyset_pages_over_parts_list_everything_once(
    parts: list[list[tuple[str, int]]], size: int
) -> None:
    """Each part answers with up to ``size`` after the cursor (as a node does); paging to the
    end lists exactly the merge of everything, in order."""
    # A node's own part holds each execution once (it merges its history and memory).
    nodes = [merge_executions([[_ex(j, s) for j, s in part]]) for part in parts]
    want = [e.id for e in merge_executions(nodes)]
    got: list[str] = []
    token = ""
    for _ in range(100):
        after = decode_page_token(token)
        answers = [[e for e in rows if comes_after(e, after)][:size] for rows in nodes]
        more = any(len(a) == size for a in answers)
        page, token = cut_page(merge_executions(answers), size, more)
        got += [e.id for e in page]
        if not token:
            break
    assert got == want


def test_a_worker_on_several_nodes_is_listed_once_with_its_nodes() -> None:
    def w(node: str, in_flight: int, connected: int) -> scheduler_pb2.WorkerStatus:
        return scheduler_pb2.WorkerStatus(
            worker_id="w1",
            node_id=node,
            queues=["default"],
            capacity=8,
            in_flight=in_flight,
            connected_ms=connected,
        )

    other = scheduler_pb2.WorkerStatus(worker_id="w0", node_id="n2", capacity=1)
    merged = merge_workers([[w("n2", 1, 50)], [w("n1", 2, 40), other], [w("n3", 0, 60)]])
    assert [m.worker_id for m in merged] == ["w0", "w1"]
    one = merged[1]
    assert list(one.node_ids) == ["n1", "n2", "n3"]
    assert one.node_id == "n1"
    assert (one.in_flight, one.capacity, one.connected_ms) == (3, 8, 40)
    assert list(one.queues) == ["default"]
    assert list(merged[0].node_ids) == ["n2"]

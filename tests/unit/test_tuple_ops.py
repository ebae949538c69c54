"""etcd's duplicate-key rule in the in-process backends: the quick check and the exact one."""

from __future__ import annotations

import random
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from schedd.store import TxnRejected
from schedd.store._tuple_ops import TupleOps, check_branch, check_request

KEYS = [b"k%d" % i for i in range(6)]  # few keys: clashes are common
ops = TupleOps()


def _op(rng: random.Random, depth: int) -> Any:
    roll = rng.random()
    key = rng.choice(KEYS)
    if roll < 0.5:
        return ops.put(key, b"v")
    if roll < 0.7:
        end = rng.choice([b"", b"\x00", rng.choice(KEYS)])
        return ops.delete(key, end if end in (b"", b"\x00") or end > key else b"")
    if roll < 0.8 or depth >= 2:
        return ops.get(key)
    then = [_op(rng, depth + 1) for _ in range(rng.randrange(0, 3))]
    other = [_op(rng, depth + 1) for _ in range(rng.randrange(0, 3))]
    return ops.txn([ops.cmp_mod(key, 0)], then, other)


def _verdict(check: Any, branch: list[Any]) -> bool:
    try:
        check(branch)
    except TxnRejected:
        return False
    return True


@settings(max_examples=2000, deadline=None)
@given(st.integers(0, 2**32))
def test_quick_check_agrees_with_the_exact_rule(seed: int) -> None:
    rng = random.Random(seed)
    branch = [_op(rng, 0) for _ in range(rng.randrange(1, 5))]
    assert _verdict(check_request, branch) == _verdict(check_branch, branch), branch


@pytest.mark.parametrize(
    ("branch", "ok"),
    [
        ([ops.put(b"a", b""), ops.put(b"b", b"")], True),
        ([ops.put(b"a", b""), ops.put(b"a", b"")], False),
        ([ops.put(b"a", b""), ops.delete(b"a")], False),
        ([ops.put(b"b", b""), ops.delete(b"a", b"c")], False),
        ([ops.put(b"c", b""), ops.delete(b"a", b"c")], True),
        # then and else exclude each other: one key in both is not a duplicate
        ([ops.txn([], [ops.put(b"a", b"")], [ops.put(b"a", b"")])], True),
        ([ops.txn([], [ops.put(b"a", b"")], []), ops.put(b"a", b"")], False),
    ],
)
def test_the_rule_by_example(branch: list[Any], ok: bool) -> None:
    assert _verdict(check_request, branch) is ok

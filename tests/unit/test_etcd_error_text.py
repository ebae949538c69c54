"""A failed etcd call says what happened, even when the exception has no text of its own."""

from __future__ import annotations

from schedd._errors import Unavailable
from schedd.store.etcd._client import _unavailable


def test_a_deadline_names_itself() -> None:
    err = _unavailable(TimeoutError(), "range")
    assert isinstance(err, Unavailable)
    assert str(err).endswith("etcd range failed: no answer within the call's deadline")


def test_an_exception_without_text_is_named_by_its_type() -> None:
    assert str(_unavailable(ConnectionResetError(), "txn")).endswith(
        "etcd txn failed: ConnectionResetError"
    )
    assert str(_unavailable(OSError("refused"), "txn")).endswith("etcd txn failed: refused")

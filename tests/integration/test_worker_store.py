"""The worker's RocksDB pieces: ledger (with TTL pruning) and the fenced-write helper."""

from __future__ import annotations

from pathlib import Path

import pytest

from schedd import StaleToken
from schedd.v1 import worker_pb2
from schedd.worker import FencedStore, StaleWrite
from schedd.worker._ledger import Ledger


def _result(eid: str, outcome: int, finished_ms: int) -> worker_pb2.Result:
    return worker_pb2.Result(execution_id=eid, outcome=outcome, finished_ms=finished_ms, attempt=1)  # type: ignore[arg-type]


def test_ledger_records_survive_reopen_and_skip_cancelled(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path / "ledger")
    ledger.record(_result("ok", worker_pb2.OUTCOME_SUCCEEDED, 1_000))
    ledger.record(_result("cxl", worker_pb2.OUTCOME_CANCELLED, 1_000))
    got = ledger.get("ok")
    assert got is not None and got.outcome == worker_pb2.OUTCOME_SUCCEEDED  # buffered, visible
    ledger.close()
    reopened = Ledger(tmp_path / "ledger")
    got = reopened.get("ok")
    assert got is not None and got.finished_ms == 1_000
    assert reopened.get("cxl") is None
    reopened.close()


def test_ledger_prunes_old_entries_and_checkpoints(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path / "ledger")
    day = 86_400_000
    ledger.record(_result("old", worker_pb2.OUTCOME_SUCCEEDED, 1 * day))
    ledger.record(_result("new", worker_pb2.OUTCOME_FAILED, 9 * day))
    ledger.save_checkpoint("old-cp", b"x", now_ms=1 * day)
    ledger.save_checkpoint("new-cp", b"y", now_ms=9 * day)
    ledger.flush()
    assert ledger.prune(now_ms=10 * day, ttl_s=7 * 86_400) == 2
    assert ledger.get("old") is None and ledger.get("new") is not None
    assert ledger.load_checkpoint("old-cp") is None and ledger.load_checkpoint("new-cp") == b"y"
    ledger.close()


def test_success_drops_the_checkpoint(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path / "ledger")
    ledger.save_checkpoint("e", b"progress")
    ledger.record(_result("e", worker_pb2.OUTCOME_SUCCEEDED, 5))
    ledger.flush()
    assert ledger.load_checkpoint("e") is None
    ledger.close()


def test_fenced_store_refuses_stale_writers(tmp_path: Path) -> None:
    with FencedStore(tmp_path / "effects") as store:
        store.put("invoice/1", b"v5", token=5)
        store.put("invoice/1", b"v5-again", token=5)  # the same attempt may rewrite
        store.put("invoice/1", b"v7", token=7)
        with pytest.raises(StaleWrite) as err:
            store.put("invoice/1", b"zombie", token=6)
        assert isinstance(err.value, StaleToken)
        assert err.value.current == 7 and "invoice/1" in str(err.value)
        assert store.get("invoice/1") == b"v7" and store.token("invoice/1") == 7
        assert store.get("missing") is None and store.token("missing") is None


def test_success_drops_a_checkpoint_saved_before_a_restart(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path / "ledger")
    ledger.save_checkpoint("e", b"progress")
    ledger.save_checkpoint("failing", b"kept")
    ledger.record(_result("x", worker_pb2.OUTCOME_SUCCEEDED, 5))  # a ledger key after C...
    ledger.close()
    reopened = Ledger(tmp_path / "ledger")
    reopened.record(_result("e", worker_pb2.OUTCOME_SUCCEEDED, 6))
    reopened.record(_result("failing", worker_pb2.OUTCOME_FAILED, 6))  # may be retried: kept
    reopened.flush()
    assert reopened.load_checkpoint("e") is None
    assert reopened.load_checkpoint("failing") == b"kept"
    reopened.close()

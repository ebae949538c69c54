"""A data dir another process still holds gives a clear error, not RocksDB's raw one."""

from __future__ import annotations

from pathlib import Path

import pytest

from schedd._errors import FailedPrecondition
from schedd.history import History
from schedd.worker._ledger import Ledger


def test_a_held_history_is_refused_with_what_to_do(tmp_path: Path) -> None:
    first = History(tmp_path / "history")
    try:
        with pytest.raises(FailedPrecondition, match="in use by another process") as info:
            History(tmp_path / "history")
        assert str(tmp_path / "history") in str(info.value)
        assert "run history" in str(info.value)
    finally:
        first.close()
    History(tmp_path / "history").close()  # free again once the first is closed


def test_a_held_worker_ledger_is_refused_with_what_to_do(tmp_path: Path) -> None:
    first = Ledger(tmp_path / "ledger")
    try:
        with pytest.raises(FailedPrecondition, match=r"worker ledger .* in use"):
            Ledger(tmp_path / "ledger")
    finally:
        first.close()

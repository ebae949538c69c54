"""Opening a local RocksDB (run history, worker ledger) with an error a person can act on."""

from __future__ import annotations

from pathlib import Path

from rocksdict import Options, Rdict

from schedd._errors import FailedPrecondition

#: What to do when another process holds a data dir, unless the caller knows better.
IN_USE_HINT = "stop that process, or wait until it has stopped, or use another data dir"


def open_rocksdb(path: Path, what: str, in_use_hint: str = IN_USE_HINT) -> Rdict:
    """Opens (creating) the RocksDB at ``path`` in raw mode.

    Raises:
        FailedPrecondition: it cannot be opened; when another process holds it (its ``LOCK``:
            a previous process on the same data dir still running or still stopping), the
            message says so and what to do (``in_use_hint``).
    """
    path.mkdir(parents=True, exist_ok=True)
    try:
        return Rdict(str(path), Options(raw_mode=True))
    except Exception as exc:  # rocksdict raises plain Exception with RocksDB's status text
        text = str(exc)
        if "lock" in text.lower():
            raise FailedPrecondition(
                f"the {what} at {path} is in use by another process (its LOCK is held): "
                f"{in_use_hint}"
            ) from exc
        raise FailedPrecondition(f"cannot open the {what} at {path}: {text}") from exc

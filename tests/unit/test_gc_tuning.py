"""schedd._gc: collector settings of the CLI processes (in a subprocess: they are global)."""

from __future__ import annotations

import subprocess
import sys

_SCRIPT = """
import gc
from schedd import _gc

_gc.freeze_survivors()
assert gc.get_freeze_count() == 0, "an untuned process (a library user) never freezes"
_gc.tune_gc()
assert gc.get_threshold()[0] == _gc.GEN0_THRESHOLD
base = gc.get_freeze_count()
keep = [[i] for i in range(5000)]  # long-lived containers made after start-up
_gc.freeze_survivors()
assert gc.get_freeze_count() >= base + 5000
_gc.thaw()
assert gc.get_freeze_count() == 0
a = []; a.append(a); del a  # cyclic garbage made while frozen is collected after a thaw
_gc.freeze_survivors()
_gc.thaw()
assert gc.collect() >= 1
print("ok")
"""


def test_tune_freeze_and_thaw() -> None:
    out = subprocess.run(
        [sys.executable, "-c", _SCRIPT], capture_output=True, text=True, timeout=60, check=False
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"

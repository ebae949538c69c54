"""Clock skew with real processes: a node whose clock is off (libfaketime) owns nothing and
says why, in its log; the others keep every fire."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest
from cluster.effects import EffectLedger
from cluster.procs import ClusterProcs, wait_for
from cluster.scenario import Scenario

pytestmark = [pytest.mark.timeout(180), pytest.mark.slow, pytest.mark.cluster]

_LIBS = [
    Path("/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"),
    Path("/usr/lib/aarch64-linux-gnu/faketime/libfaketime.so.1"),
]


def _libfaketime() -> Path:
    for lib in _LIBS:
        if lib.exists():
            return lib
    pytest.skip("libfaketime is not installed (Debian package faketime; `make test` installs it)")


def test_node_with_a_skewed_clock_owns_nothing_and_says_why(
    procs: ClusterProcs, ledger: EffectLedger
) -> None:
    lib = _libfaketime()
    s = Scenario(procs, ledger)
    s.start(nodes=["n0", "n1"])
    env = {
        "LD_PRELOAD": str(lib),
        "FAKETIME": "+3s",  # wall clock 3 s ahead; limit is --max-clock-skew-ms 500
        "FAKETIME_DONT_FAKE_MONOTONIC": "1",
        "FAKETIME_NO_CACHE": "1",
    }
    procs.add_node("n2", extra_env=env)
    log = procs.procs["n2"].log
    wait_for(
        lambda: log.read_text(errors="replace"),
        lambda text: "clock skew" in text and "owning nothing" in text,
        timeout=30,
        what="n2 to log that its clock skew keeps it from owning partitions",
    )
    for _ in range(10):  # and it stays so, while the others own everything
        status = procs.status("n0")
        owners = {p.get("owner", "") for p in status["partitions"]}
        assert owners == {"n0", "n1"}, owners
        time.sleep(0.5)
    assert shutil.which("faketime") or lib.exists()
    s.finish("skewed node", nodes=len(status["nodes"]))

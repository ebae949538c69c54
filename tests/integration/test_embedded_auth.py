"""Tokens and the audit trail on the embedded store, as an operator sets them up on one
machine: the first admin token made with ``schedd token create`` before the node starts
(while it runs, the store is the node's), then ``schedd node --auth`` and schedctl."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from schedd.dev import free_port

pytestmark = pytest.mark.timeout(120)

SCHEDD = [sys.executable, "-m", "schedd.cli.schedd_main"]
SCHEDCTL = str(Path(sys.executable).parent / "schedctl")


def _ctl(listen: str, token: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "SCHEDCTL_TOKEN": token}
    return subprocess.run(
        [SCHEDCTL, "--endpoints", listen, *args],
        capture_output=True, text=True, timeout=30, check=False, env=env,
    )  # fmt: skip


def test_tokens_and_audit_on_one_machine(tmp_path: Path) -> None:
    store = f"rocksdb:{tmp_path / 'store'}"
    made = subprocess.run(
        [*SCHEDD, "token", "create", "--store", store, "--role", "admin"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    secret = made.stdout.strip()
    listen = f"127.0.0.1:{free_port()}"
    node = subprocess.Popen(
        [*SCHEDD, "node", "--store", store, "--auth", "--listen", listen,
         "--data-dir", str(tmp_path / "node"), "--partitions", "4"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while (who := _ctl(listen, secret, "whoami", "-o", "json")).returncode != 0:
            assert time.monotonic() < deadline, who.stderr
            time.sleep(0.3)
        assert json.loads(who.stdout)["role"] == "admin"
        # While the node runs, the store is its own: a second writer is told so.
        second = subprocess.run(
            [*SCHEDD, "token", "create", "--store", store], capture_output=True, text=True,
            timeout=60, check=False,
        )  # fmt: skip
        assert second.returncode == 5
        assert "held by one process at a time" in second.stderr
        assert "Traceback" not in second.stderr
        # Later tokens through the node; a call without a token is refused.
        viewer = _ctl(
            listen, secret, "token", "create", "--role", "viewer", "--tenant", "acme", "-o", "json"
        )
        assert viewer.returncode == 0, viewer.stderr
        created = _ctl(listen, secret, "job", "create", "hi", "--schedule", "@every 1h",
                       "--handler", "echo", "-o", "json")  # fmt: skip
        assert created.returncode == 0, created.stderr
        anonymous = _ctl(listen, "", "job", "list")
        assert anonymous.returncode != 0 and "Traceback" not in anonymous.stderr
        audit = _ctl(listen, secret, "audit", "list", "-o", "json")
        assert audit.returncode == 0, audit.stderr
        methods = [e["method"] for e in json.loads(audit.stdout)["entries"]]
        assert methods[0] == "CreateToken"  # the bootstrap, recorded by schedd token create
        assert "CreateJob" in methods and methods.count("CreateToken") == 2
    finally:
        node.terminate()
        node.wait(30)

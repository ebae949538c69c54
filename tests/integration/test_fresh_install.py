"""`pip install` and go: a fresh virtualenv on a machine without etcd runs `schedd dev`,
`schedctl` and the Python SDK.

The package is installed the two ways a new user does, each into a virtualenv of its own:
from a built wheel, and with ``pip install <checkout>``. Then ``schedd dev`` runs with only the
virtualenv on ``PATH`` (so no ``etcd`` binary can be found, nor anything else of this
machine's), a job is created with that virtualenv's ``schedctl`` and its run read back with
its Python SDK, and Ctrl-C stops it cleanly.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from schedd.dev import free_port

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

REPO = Path(__file__).resolve().parents[2]

SDK_PROBE = """
import json, sys, time
from schedd.client import Client
with Client(sys.argv[1]) as client:
    deadline = time.monotonic() + 30
    while True:
        runs = client.list_executions(job_id=sys.argv[2], limit=10)
        done = [r for r in runs if r.state == 4]  # EXECUTION_SUCCEEDED
        if done or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    print(json.dumps({"succeeded": len(done), "states": [r.state for r in runs]}))
"""


def _run(argv: list[str], **kw: object) -> subprocess.CompletedProcess[str]:
    out = subprocess.run(argv, capture_output=True, text=True, timeout=240, check=False, **kw)  # type: ignore[call-overload]
    assert out.returncode == 0, f"{argv} exited {out.returncode}\n{out.stdout}\n{out.stderr}"
    return out  # type: ignore[no-any-return]


def _venv(path: Path, *install: str) -> Path:
    """A new virtualenv at ``path`` with ``install`` pip-installed; returns its bin dir."""
    _run([sys.executable, "-m", "venv", str(path)])
    _run([str(path / "bin" / "python"), "-m", "pip", "install", "-q", *install])
    return path / "bin"


def _bare_env(bin_dir: Path) -> dict[str, str]:
    """Only the virtualenv on PATH: no etcd, no system tools."""
    env = {"PATH": str(bin_dir), "HOME": os.environ.get("HOME", "/tmp"), "LANG": "C.UTF-8"}
    assert shutil.which("etcd", path=env["PATH"]) is None
    return env


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    _run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", str(REPO), "-w", str(out)])
    [built] = out.glob("schedd-*.whl")
    return built


def test_a_wheel_in_a_fresh_venv_runs_dev_schedctl_and_the_sdk(wheel: Path, tmp_path: Path) -> None:
    bin_dir = _venv(tmp_path / "venv", str(wheel))
    env = _bare_env(bin_dir)
    listen = f"127.0.0.1:{free_port()}"
    dev = subprocess.Popen(
        [str(bin_dir / "schedd"), "dev", "--data-dir", str(tmp_path / "dev"), "--listen", listen,
         "--metrics-listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path,
    )  # fmt: skip
    try:
        assert dev.stdout is not None
        lines: list[str] = []
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not any("schedctl job create" in x for x in lines):
            lines.append(dev.stdout.readline())
        text = "".join(lines)
        assert "schedd dev is running" in text and "rocksdb:" in text, text
        created = _run(
            [str(bin_dir / "schedctl"), "--endpoints", listen, "job", "create", "hello",
             "--schedule", "@after 1s", "--handler", "echo", "--payload", '{"msg": "hi"}',
             "-o", "json"],
            env=env,
        )  # fmt: skip
        job_id = json.loads(created.stdout)["id"]
        probe = _run([str(bin_dir / "python"), "-c", SDK_PROBE, listen, job_id], env=env)
        assert json.loads(probe.stdout)["succeeded"] == 1, probe.stdout
    finally:
        dev.send_signal(signal.SIGINT)
        try:
            code = dev.wait(30)
        except subprocess.TimeoutExpired:
            dev.kill()
            raise
    assert code == 0, dev.stderr.read() if dev.stderr else ""
    assert not (tmp_path / "dev" / "etcd").exists()  # nothing of etcd was started or made


def test_pip_install_of_the_checkout_gives_the_commands_and_the_sdk(tmp_path: Path) -> None:
    bin_dir = _venv(tmp_path / "venv", str(REPO))
    env = _bare_env(bin_dir)
    for command in ("schedd", "schedctl"):
        out = _run([str(bin_dir / command), "--help"], env=env)
        assert "Usage:" in out.stdout
    _run([str(bin_dir / "python"), "-c", "import schedd.client, schedd.worker, schedd.store"],
         env=env)  # fmt: skip

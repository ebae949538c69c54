"""An embedded store's directory that cannot be used: a real ``schedd node`` says so in one line,
exits non-zero, and changes nothing; a full disk stops the node with one clear line, and the
node started again (once there is room) has everything that was acknowledged."""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from rocksdict import Options, Rdict

from schedd.client import Client
from schedd.dev import free_port
from schedd.store import RocksKV
from schedd.store.rocksdb._layout import FORMAT_KEY, FORMAT_PREFIX

pytestmark = pytest.mark.timeout(120)

SCHEDD = [sys.executable, "-m", "schedd.cli.schedd_main"]
#: Files RocksDB itself (re)writes on any open attempt: its info log.
_INFO_LOGS = ("LOG",)


def _node(store: Path, data: Path, listen: str = "") -> list[str]:
    listen = listen or f"127.0.0.1:{free_port()}"
    return [*SCHEDD, "node", "--store", f"rocksdb:{store}", "--data-dir", str(data),
            "--listen", listen, "--partitions", "4"]  # fmt: skip


def _refused(store: Path, tmp_path: Path) -> str:
    """Runs a node on ``store``; it must exit 5 with one line on stderr, which is returned."""
    out = subprocess.run(
        _node(store, tmp_path / "node"), capture_output=True, text=True, timeout=60, check=False
    )
    assert out.returncode == 5, (out.returncode, out.stderr)
    assert "Traceback" not in out.stderr, out.stderr
    lines = [ln for ln in out.stderr.splitlines() if "schedd node:" in ln]
    assert len(lines) == 1, out.stderr
    return lines[0]


def _files(d: Path) -> dict[str, bytes]:
    return {
        p.name: p.read_bytes()
        for p in d.iterdir()
        if p.is_file() and not p.name.startswith(_INFO_LOGS)
    }


def _made_store(path: Path) -> None:
    async def make() -> None:
        kv = await RocksKV.open(path)
        for n in range(50):
            await kv.put(b"/k/%d" % n, b"v%d" % n)
        await kv.close()

    asyncio.run(make())


def test_a_store_of_a_newer_format_is_refused_and_left_as_it_is(tmp_path: Path) -> None:
    store = tmp_path / "store"
    _made_store(store)
    db = Rdict(str(store), Options(raw_mode=True))
    db[FORMAT_KEY] = FORMAT_PREFIX + b"99"
    before = dict(db.items())
    db.close()
    line = _refused(store, tmp_path)
    assert f"the schedd store at {store} has format 99, newer than this schedd reads" in line
    db = Rdict(str(store), Options(raw_mode=True))
    try:
        assert dict(db.items()) == before
    finally:
        db.close()


def test_a_torn_store_is_refused_and_left_as_it_is(tmp_path: Path) -> None:
    store = tmp_path / "store"
    _made_store(store)
    (store / "CURRENT").unlink()  # RocksDB's pointer to its manifest, lost
    before = _files(store)
    line = _refused(store, tmp_path)
    assert f"the schedd store at {store} is damaged" in line and "CURRENT" in line
    assert _files(store) == before
    # The manifest CURRENT names is gone: RocksDB's own words, in one line. (A write torn
    # at the tail of the log is another matter: RocksDB drops the torn tail, which was never
    # acknowledged, and opens.)
    _made_store(tmp_path / "torn")
    for manifest in (tmp_path / "torn").glob("MANIFEST-*"):
        manifest.unlink()
    before = _files(tmp_path / "torn")
    line = _refused(tmp_path / "torn", tmp_path)
    assert f"cannot open the schedd store at {tmp_path / 'torn'}" in line
    assert _files(tmp_path / "torn") == before


def test_another_programs_directory_is_not_taken_for_a_store(tmp_path: Path) -> None:
    other = tmp_path / "photos"
    other.mkdir()
    (other / "cat.jpg").write_bytes(b"\xff\xd8 not a database")
    line = _refused(other, tmp_path)
    assert f"{other} is not a schedd store" in line
    assert _files(other) == {"cat.jpg": b"\xff\xd8 not a database"}


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 16 MiB filesystem of its own (tmpfs; needs root and mount, else skipped)."""
    mnt = tmp_path / "disk"
    mnt.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a small filesystem needs root")
    made = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(mnt)],
        capture_output=True,
        text=True,
        check=False,
    )
    if made.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {made.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def test_a_full_disk_stops_the_node_in_one_line_and_loses_nothing(
    small_disk: Path, tmp_path: Path
) -> None:
    ballast = small_disk / "ballast"
    ballast.write_bytes(b"\0" * (4 << 20))  # freed later: the operator making room
    listen = f"127.0.0.1:{free_port()}"
    argv = _node(small_disk / "store", tmp_path / "node", listen)
    node = subprocess.Popen(argv, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    client = Client(listen, timeout_s=10)
    acknowledged: list[str] = []
    refusal = ""
    try:
        _wait_serving(client)
        payload = {"blob": "x" * 200_000}
        for i in range(200):
            try:
                job = client.create_job(f"j{i}", schedule="0 0 1 1 *", handler="h", payload=payload)
            except Exception as exc:  # the disk is full
                refusal = str(exc)
                break
            acknowledged.append(job.job.id)
        assert acknowledged and "No space left on device" in refusal, refusal
        code = node.wait(30)  # the node stops by itself, in one line
        assert node.stderr is not None
        err = node.stderr.read()
    finally:
        client.close()
        if node.poll() is None:
            node.kill()
    assert code == 5, err
    assert "Traceback" not in err
    [line] = [ln for ln in err.splitlines() if ln.startswith("schedd node:")]
    assert "No space left on device" in line and "restart it once the cause is fixed" in line
    ballast.unlink()
    again = subprocess.Popen(argv, stderr=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
    client = Client(listen, timeout_s=10)
    try:
        _wait_serving(client)
        stored = {j.id for j in client.list_jobs(page_size=1000)}
        assert set(acknowledged) <= stored  # nothing acknowledged was lost
        assert len(stored) <= len(acknowledged) + 1  # at most the one whose answer was lost
    finally:
        client.close()
        again.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            again.wait(20)
        if again.poll() is None:
            again.kill()


def _wait_serving(client: Client) -> None:
    deadline = time.monotonic() + 30
    while True:
        try:
            st = client.cluster_status()
            if st.partitions and all(p.owner for p in st.partitions):
                return
        except Exception:
            if time.monotonic() > deadline:
                raise
        time.sleep(0.2)

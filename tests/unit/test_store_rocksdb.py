"""What only a durable store promises: the rocksdb backend across close, reopen and crashes.

The contract suite (tests/contract/) proves the semantics it shares with memory and etcd;
these tests prove what a directory on disk adds: state and revision survive, a dead
process's leases do not hold the new one up, one process at a time, and a format marker.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from rocksdict import Options, Rdict

import schedd
from schedd._clock import ManualClock
from schedd._errors import FailedPrecondition, Unavailable
from schedd.store import RevisionCompacted, WatchEvent, prefix_end
from schedd.store.rocksdb import FORMAT_VERSION, RocksKV

ALL = (b"", b"\x00")  # every key


def _child_env() -> dict[str, str]:
    """The child imports the same schedd as this test (the worktree, not the venv's)."""
    src = str(Path(schedd.__file__).resolve().parents[1])
    return {**os.environ, "PYTHONPATH": os.pathsep.join([src, os.environ.get("PYTHONPATH", "")])}


def _run_child(code: str, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code), *args],
        env=_child_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


async def _events(kv: RocksKV, from_rev: int, n: int) -> list[WatchEvent]:
    out: list[WatchEvent] = []
    async with asyncio.timeout(5):
        async for batch in kv.watch(*ALL, from_rev):
            out += batch.events
            if len(out) >= n:
                return out
    return out


async def test_keys_revision_and_history_survive_close_and_reopen(tmp_path: Path) -> None:
    kv = await RocksKV.open(tmp_path)
    r1 = await kv.put(b"a", b"1")
    r2 = await kv.put(b"a", b"2")
    r3 = (await kv.txn([], [kv.ops.put(b"b", b"3"), kv.ops.delete(b"zz")])).revision
    await kv.close()
    with pytest.raises(Unavailable, match="closed"):
        await kv.get(b"a")

    kv = await RocksKV.open(tmp_path)
    try:
        assert kv.revision == r3
        a = await kv.get(b"a")
        assert a is not None
        assert (a.value, a.create_revision, a.mod_revision, a.version) == (b"2", r1, r2, 2)
        kvs, _, _ = await kv.range(*ALL, revision=r1)
        assert [(x.key, x.value) for x in kvs] == [(b"a", b"1")]
        events = await _events(kv, r1, 3)
        assert [(e.kind, e.kv.key, e.kv.mod_revision) for e in events] == [
            ("put", b"a", r1),
            ("put", b"a", r2),
            ("put", b"b", r3),
        ]
        assert await kv.put(b"c", b"4") == r3 + 1  # revisions go on where they stopped
    finally:
        await kv.close()


async def test_leases_of_a_previous_process_are_revoked_at_reopen(tmp_path: Path) -> None:
    clock = ManualClock(1_000)
    kv = await RocksKV.open(tmp_path, clock=clock)
    first, second = await kv.grant(60), await kv.grant(60)
    await kv.put(b"nodes/n1", b"up", lease=first)
    await kv.put(b"owners/0", b"n1", lease=first)
    await kv.put(b"owners/1", b"n1", lease=second)
    await kv.put(b"owners/1", b"n1 detached")  # lease 0 detaches it: it stays
    await kv.put(b"owners/2", b"n1", lease=second)
    before = await kv.put(b"plain", b"x")
    await kv.close()

    # No time passes: the new process does not wait out its predecessor's 60 s TTL.
    kv = await RocksKV.open(tmp_path, clock=clock)
    try:
        kvs, rev, _ = await kv.range(*ALL)
        assert [x.key for x in kvs] == [b"owners/1", b"plain"]
        assert rev == before + 2  # one revision per lease, as an expiry would
        events = await _events(kv, before + 1, 3)
        assert [(e.kind, e.kv.key, e.kv.mod_revision) for e in events] == [
            ("delete", b"nodes/n1", before + 1),
            ("delete", b"owners/0", before + 1),
            ("delete", b"owners/2", before + 2),
        ]
        assert await kv.keepalive_once(first) <= 0
        assert await kv.grant(5) > second  # ids are never reused
        with pytest.raises(Unavailable, match="lease not found"):
            await kv.put(b"again", b"x", lease=first)
    finally:
        await kv.close()


_TRY_OPEN = """
import asyncio, sys
from schedd._errors import FailedPrecondition
from schedd.store.rocksdb import RocksKV
try:
    asyncio.run(RocksKV.open(sys.argv[1]))
except FailedPrecondition as exc:
    print(str(exc))
    sys.exit(3)
print("opened")
"""


async def test_a_directory_held_by_another_process_is_refused_with_one_clear_line(
    tmp_path: Path,
) -> None:
    kv = await RocksKV.open(tmp_path)
    try:
        await kv.put(b"k", b"v")
        child = await asyncio.to_thread(_run_child, _TRY_OPEN, str(tmp_path))
    finally:
        await kv.close()
    assert child.returncode == 3, child.stdout + child.stderr
    line = child.stdout.strip()
    assert "\n" not in line
    assert line.startswith(f"the schedd store at {tmp_path} is in use by another process")
    # Once the holder has closed it, the directory is free again, its data intact.
    child = await asyncio.to_thread(_run_child, _TRY_OPEN, str(tmp_path))
    assert (child.returncode, child.stdout.strip()) == (0, "opened"), child.stderr


def _raw_marker(path: Path, mark: bytes | None = None) -> bytes | None:
    """Reads (and with ``mark``, first sets) the format marker, bypassing the store."""
    db = Rdict(str(path), Options(raw_mode=True))
    try:
        if mark is not None:
            db[b"mformat"] = mark
        found: bytes | None = db.get(b"mformat")
        return found
    finally:
        db.close()


async def test_a_directory_of_a_newer_format_is_refused_and_left_alone(tmp_path: Path) -> None:
    kv = await RocksKV.open(tmp_path)
    await kv.put(b"k", b"v")
    await kv.close()
    newer = f"schedd-kv/{FORMAT_VERSION + 1}".encode()
    _raw_marker(tmp_path, newer)
    with pytest.raises(FailedPrecondition, match=rf"format {FORMAT_VERSION + 1}, newer") as info:
        await RocksKV.open(tmp_path)
    assert str(tmp_path) in str(info.value)
    assert _raw_marker(tmp_path) == newer  # nothing rewritten
    _raw_marker(tmp_path, f"schedd-kv/{FORMAT_VERSION}".encode())
    kv = await RocksKV.open(tmp_path)  # the lock was released by the refusal
    try:
        assert (await kv.get(b"k")).value == b"v"  # type: ignore[union-attr]
    finally:
        await kv.close()


async def test_a_directory_that_is_not_a_schedd_store_is_refused(tmp_path: Path) -> None:
    other = tmp_path / "home"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    with pytest.raises(FailedPrecondition, match="not a schedd store: it holds other files"):
        await RocksKV.open(other)
    assert sorted(p.name for p in other.iterdir()) == ["notes.txt"]  # no RocksDB files added

    foreign = Rdict(str(tmp_path / "history"), Options(raw_mode=True))
    foreign[b"run/1"] = b"x"
    foreign.close()
    with pytest.raises(FailedPrecondition, match="without the schedd format marker"):
        await RocksKV.open(tmp_path / "history")


async def test_concurrent_writes_share_syncs_and_every_acknowledged_one_survives(
    tmp_path: Path,
) -> None:
    kv = await RocksKV.open(tmp_path)
    base, ops = kv.revision, kv.ops
    revisions = await asyncio.gather(
        *(
            kv.txn([ops.cmp_create(b"k%03d" % i, 0)], [ops.put(b"k%03d" % i, b"v")])
            for i in range(64)
        )
    )
    assert sorted(r.revision for r in revisions) == list(range(base + 1, base + 65))
    assert kv.syncs < kv.batches  # writers waited on shared syncs
    await kv.close()
    kv = await RocksKV.open(tmp_path)
    try:
        assert kv.revision == base + 64 and await kv.count(*ALL) == 64
    finally:
        await kv.close()


_WRITE_THEN_DIE = """
import asyncio, os, signal, sys
from schedd.store.rocksdb import RocksKV

async def main() -> None:
    kv = await RocksKV.open(sys.argv[1])
    for i in range(40):
        rev = await kv.put(b"acked/%03d" % i, b"v")
        print(i, rev, flush=True)
    os.kill(os.getpid(), signal.SIGKILL)  # no close: the WAL is all there is

asyncio.run(main())
"""


async def test_acknowledged_writes_survive_a_killed_process(tmp_path: Path) -> None:
    child = await asyncio.to_thread(_run_child, _WRITE_THEN_DIE, str(tmp_path))
    acked = [line.split() for line in child.stdout.splitlines()]
    assert len(acked) == 40, child.stderr
    kv = await RocksKV.open(tmp_path)
    try:
        kvs, rev, _ = await kv.range(*ALL)
        assert [kv.key for kv in kvs] == [b"acked/%03d" % i for i in range(40)]
        assert rev == int(acked[-1][1])
    finally:
        await kv.close()


async def test_compaction_is_kept_across_reopen(tmp_path: Path) -> None:
    kv = await RocksKV.open(tmp_path)
    r1 = await kv.put(b"a", b"1")
    r2 = await kv.put(b"a", b"2")
    r3 = await kv.put(b"b", b"3")
    await kv.compact(r2)
    await kv.close()
    kv = await RocksKV.open(tmp_path)
    try:
        with pytest.raises(RevisionCompacted):
            await kv.range(*ALL, revision=r1)
        kvs, _, _ = await kv.range(*ALL, revision=r2)
        assert [(x.key, x.value) for x in kvs] == [(b"a", b"2")]
        events = await _events(kv, r2, 2)
        assert [(e.kv.value, e.kv.mod_revision) for e in events] == [(b"2", r2), (b"3", r3)]
        await kv.compact(r1)  # older than the kept compaction: a no-op
        assert (await kv.range(*ALL, revision=r3))[0][-1].value == b"3"
    finally:
        await kv.close()


async def test_reads_see_the_synced_state_while_a_write_waits_for_its_sync(
    tmp_path: Path,
) -> None:
    kv = await RocksKV.open(tmp_path)
    try:
        r1 = await kv.put(b"k", b"old")
        writing = asyncio.ensure_future(kv.put(b"k", b"new"))
        await asyncio.sleep(0)  # the write is applied; its sync runs in a thread
        assert not writing.done()
        seen = await kv.get(b"k")
        assert seen is not None and seen.value == b"old"
        kvs, rev, _ = await kv.range(b"k", prefix_end(b"k"), limit=1)
        assert rev == r1 and kvs[0].value == b"old"
        assert [x.value for x in await kv.get_many([b"k"])] == [b"old"]  # type: ignore[union-attr]
        assert await writing == r1 + 1
        assert (await kv.get(b"k")).value == b"new"  # type: ignore[union-attr]
    finally:
        await kv.close()

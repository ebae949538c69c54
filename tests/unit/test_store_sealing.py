"""Encryption at rest in the store layer, on the memory backend: what the stores write holds no
secret, what they read is plaintext again; the owner's lenient reads; the run history; the
cluster's record of keys in use; and rekey (store/_sealing.py, _keys_in_use.py, _rekey.py)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from schedd._clock import ManualClock
from schedd._errors import EncryptionKeyError, Undecryptable
from schedd.history import History
from schedd.model import validate_new_job
from schedd.store import (
    RUN,
    EncryptionKey,
    Fence,
    JobStore,
    Keyring,
    Keys,
    MemoryKV,
    PartitionStore,
    Sealer,
    check_keyring,
    prefix_end,
    prepare_keyring,
    read_keys_in_use,
    rekey,
)
from schedd.store._envelope import key_id_of
from schedd.v1 import execution_pb2, job_pb2

NOW = 1_700_000_000_000
K1 = EncryptionKey("k1", bytes(range(32)))
K1_OTHER = EncryptionKey("k1", bytes(range(1, 33)))
K2 = EncryptionKey("k2", bytes(range(2, 34)))
SECRETS = (b"payload-secret", b"header-secret", b"env-secret", b"override-secret", b"ckpt-secret")


def _job(job_id: str, **target: Any) -> job_pb2.Job:
    spec = job_pb2.Job(
        id=job_id,
        name=job_id,
        schedule=job_pb2.Schedule(expr="@every 1h"),
        payload=b'{"token": "payload-secret"}',
        **(target or {"handler": job_pb2.HandlerTarget(name="noop")}),
    )
    return validate_new_job(spec, now_ms=NOW, id_factory=lambda: "")


def _jobs() -> list[job_pb2.Job]:
    return [
        _job("plain"),
        _job(
            "hook",
            http=job_pb2.HttpTarget(
                url="https://example.com/x", headers={"Authorization": "Bearer header-secret"}
            ),
        ),
        _job("cmd", shell=job_pb2.ShellTarget(argv=["true"], env={"TOKEN": "env-secret"})),
    ]


async def _values(kv: MemoryKV, keys: Keys) -> list[bytes]:
    kvs, _ = await kv.range_all(keys.prefix, prefix_end(keys.prefix))
    return [k.value for k in kvs]


def _leaks(values: list[bytes]) -> list[bytes]:
    return [s for s in SECRETS for v in values if s in v]


def _store() -> tuple[MemoryKV, Keys]:
    return MemoryKV(clock=ManualClock(NOW)), Keys(b"/t/")


async def test_stores_write_no_secret_and_read_plaintext() -> None:
    kv, keys = _store()
    sealer = Sealer(Keyring([K1]))
    jobs = JobStore(kv, keys, partitions=2, sealer=sealer)
    created = await jobs.create_jobs(_jobs(), NOW)
    assert all(isinstance(c, tuple) and c[0].payload.startswith(b"{") for c in created)
    plain = await jobs.get_job("plain")
    [run] = await jobs.add_runs(
        plain, [NOW], execution_pb2.TRIGGER_MANUAL, NOW, payload_override=b"override-secret"
    )
    owner = keys.owner_key(jobs.partition("plain"))
    store = PartitionStore(
        kv, keys, Fence(jobs.partition("plain"), owner, await kv.put(owner, b"n")), sealer=sealer
    )
    run.checkpoint = b"ckpt-secret"
    assert (await store.apply([store.save_checkpoint(run)])).ok == [True]
    assert _leaks(await _values(kv, keys)) == []

    hook, cmd = await jobs.get_job("hook"), await jobs.get_job("cmd")
    assert plain.payload == b'{"token": "payload-secret"}'
    assert hook.http.headers["Authorization"] == "Bearer header-secret"
    assert cmd.shell.env["TOKEN"] == "env-secret"
    listed, _ = await jobs.list_jobs()
    assert {j.id: j.payload for j in listed} == {j.id: plain.payload for j in listed}
    [live] = await jobs.list_live("plain")
    assert live.payload_override == b"override-secret"
    [loaded] = await store.load_runs()
    assert loaded.checkpoint == b"ckpt-secret" and store.sealer.failures == 0

    def rename(job: job_pb2.Job) -> job_pb2.Job:
        job.name = "renamed"
        return job

    updated = await jobs.update_job("hook", rename, NOW)
    assert updated.http.headers["Authorization"] == "Bearer header-secret"
    assert _leaks(await _values(kv, keys)) == []


async def test_records_written_before_encryption_still_read() -> None:
    kv, keys = _store()
    await JobStore(kv, keys, partitions=1).create_jobs(_jobs(), NOW)  # no keyring
    assert _leaks(await _values(kv, keys))  # plaintext, as before
    jobs = JobStore(kv, keys, partitions=1, sealer=Sealer(Keyring([K1])))
    assert (await jobs.get_job("cmd")).shell.env["TOKEN"] == "env-secret"


async def test_a_sealed_value_moved_into_another_job_does_not_open() -> None:
    kv, keys = _store()
    jobs = JobStore(kv, keys, partitions=1, sealer=Sealer(Keyring([K1])))
    await jobs.create_jobs([_job("a"), _job("b")], NOW)
    a = await jobs.read("a", opened=False)
    b = await jobs.read("b", opened=False)
    b.job.payload = a.job.payload  # someone with write access to etcd swaps them
    await kv.put(keys.job_key("b"), b.job.SerializeToString())
    with pytest.raises(Undecryptable, match=r"'b' job\.payload: does not decrypt with key 'k1'"):
        await jobs.get_job("b")
    assert await jobs.delete_job("b", NOW) == 0  # what only needs ids still works


async def test_the_owner_reads_leniently_and_nothing_sealed_leaves_unnoticed() -> None:
    kv, keys = _store()
    await JobStore(kv, keys, partitions=1, sealer=Sealer(Keyring([K2]))).create_jobs(_jobs(), NOW)
    owner = keys.owner_key(0)
    fence = Fence(0, owner, await kv.put(owner, b"n"))
    lacking = PartitionStore(kv, keys, fence, sealer=Sealer(Keyring([K1])))
    cached = await lacking.fetch_jobs(["plain", "hook", "cmd"])
    assert lacking.sealer.failures == 3 and key_id_of(cached["plain"].job.payload) == "k2"
    ex = execution_pb2.Execution(job_id="hook", scheduled_ms=NOW)
    found, problem = lacking.sealer.reopen(cached["hook"].job, ex)
    assert found and "key 'k2', which is not in this keyring" in problem
    # The key arrives (a keyring re-reads its file, see Keyring.get): the same objects open.
    lacking.sealer.keyring = Keyring([K1, K2])
    assert lacking.sealer.reopen(cached["hook"].job, ex) == (True, "")
    assert cached["hook"].job.http.headers["Authorization"] == "Bearer header-secret"
    assert lacking.sealer.reopen(cached["hook"].job, ex) == (False, "")


async def test_run_history_keeps_secrets_sealed(tmp_path: Path) -> None:
    sealer = Sealer(Keyring([K1]))
    history = History(tmp_path / "h", encode=sealer.history_value, decode=sealer.read_history)
    ex = execution_pb2.Execution(
        id=f"j1@{NOW}", job_id="j1", scheduled_ms=NOW, finished_ms=NOW, fencing_token=7,
        state=execution_pb2.EXECUTION_SUCCEEDED, result=b"override-secret",
    )  # fmt: skip
    history.record([ex])
    history.close()
    raw = (tmp_path / "h").rglob("*")
    assert not any(b"override-secret" in p.read_bytes() for p in raw if p.is_file())
    history = History(tmp_path / "h", encode=sealer.history_value, decode=sealer.read_history)
    assert history.get(ex.id) == ex
    history.close()
    other = Sealer(Keyring([K2]))
    history = History(tmp_path / "h", encode=other.history_value, decode=other.read_history)
    got = history.get(ex.id)
    assert got is not None and got.result == b"" and got.fencing_token == 7  # never ciphertext
    history.close()


async def test_keys_in_use_check_at_start() -> None:
    kv, keys = _store()
    assert (await prepare_keyring(kv, keys, None)).ids() == []  # not in use: nothing written
    assert await kv.get(keys.encryption_key()) is None
    assert (await prepare_keyring(kv, keys, Keyring([K1]))).ids() == ["k1"]
    in_use = await read_keys_in_use(kv, keys)
    with pytest.raises(EncryptionKeyError, match=r"encrypted \(key 'k1'\) and no keyring was"):
        check_keyring(in_use, None)
    with pytest.raises(EncryptionKeyError, match="key 'k1', which is not in the keyring"):
        check_keyring(in_use, Keyring([K2]))
    with pytest.raises(EncryptionKeyError, match="key 'k1' in the keyring is not the key"):
        check_keyring(in_use, Keyring([K1_OTHER]))
    assert (await prepare_keyring(kv, keys, Keyring([K1, K2]))).ids() == ["k1", "k2"]
    with pytest.raises(EncryptionKeyError, match="--encryption-keys FILE"):
        await prepare_keyring(kv, keys, Keyring([K2]))  # k1 is still in use


class _RacingKV(MemoryKV):
    """Runs ``race`` once, right after the next range read: a concurrent writer."""

    race: Callable[[], Awaitable[None]] | None = None

    async def range(self, *args: Any, **kwargs: Any) -> Any:
        out = await super().range(*args, **kwargs)
        race, self.race = self.race, None
        if race is not None:
            await race()
        return out


async def test_rekey_rewrites_under_the_new_key_and_forgets_the_old() -> None:
    kv, keys = _RacingKV(clock=ManualClock(NOW)), Keys(b"/t/")
    old = Sealer(Keyring([K1]))
    await prepare_keyring(kv, keys, old.keyring)
    jobs = JobStore(kv, keys, partitions=1, sealer=old)
    await jobs.create_jobs(_jobs(), NOW)
    await JobStore(kv, keys, partitions=1).create_jobs([_job("legacy")], NOW)  # plaintext
    plain = await jobs.get_job("plain")
    # A triggered run (waits on its r due entry), and a live one of a schedule fire (it
    # may be on a worker: left), with a current checkpoint; and a superseded checkpoint.
    [waiting] = await jobs.add_runs(
        plain, [NOW - 5], execution_pb2.TRIGGER_MANUAL, NOW, payload_override=b"override-secret"
    )
    owner = keys.owner_key(0)
    store = PartitionStore(kv, keys, Fence(0, owner, await kv.put(owner, b"n")), sealer=old)
    live = execution_pb2.Execution(
        id=f"plain@{NOW}", job_id="plain", scheduled_ms=NOW, due_ms=NOW, attempt=1,
        state=execution_pb2.EXECUTION_PENDING, result=b"override-secret",
    )  # fmt: skip
    live.fencing_token = await kv.put(keys.run_key(0, "plain", NOW), old.execution_value(live))
    live.checkpoint = b"ckpt-secret"
    await store.apply([store.save_checkpoint(live)])
    waiting.checkpoint = b"ckpt-secret"
    await store.apply([store.save_checkpoint(waiting)])
    await store.apply([store.rewrite_run(waiting)])  # the run key moves past its checkpoint
    due = await kv.get(keys.run_due_key(0, waiting.due_ms, "plain", waiting.scheduled_ms))
    assert due is not None and due.value[:1] == RUN.encode()

    def new_payload(job: job_pb2.Job) -> job_pb2.Job:
        job.payload = b'{"token": "payload-secret", "v": 2}'
        return job

    async def concurrent_update() -> None:  # an old node changes a job mid-rekey
        await jobs.update_job("cmd", new_payload, NOW)

    kv.race = concurrent_update
    new = Keyring([K1, K2])
    summary = await rekey(kv, keys, new, 1)
    assert (summary.left, summary.removed, summary.undecryptable, summary.failed) == (1, 1, 0, 0)
    assert summary.retried >= 1 and summary.in_use == {"k1": 1} and summary.dropped == []
    # 4 jobs (one of them plaintext), the waiting run, the live run's checkpoint.
    assert (summary.read, summary.rewritten, summary.current) == (8, 6, 0), summary.line()
    assert "still in use: k1: 1" in summary.line()
    reader = JobStore(kv, keys, partitions=1, sealer=Sealer(Keyring([K2])))
    assert (await reader.get_job("cmd")).payload.endswith(b'"v": 2}')  # the update survived
    assert (await reader.get_job("legacy")).payload == plain.payload
    assert (await reader.get_live_execution(waiting.id)).payload_override == b"override-secret"  # type: ignore[union-attr]
    assert await kv.get(keys.ckpt_key(0, "plain", waiting.scheduled_ms)) is None  # superseded

    await kv.delete(keys.run_key(0, "plain", NOW))  # the live one finished
    await kv.delete(keys.ckpt_key(0, "plain", NOW))
    again = await rekey(kv, keys, new, 1)
    assert again.dropped == ["k1"] and again.rewritten == 0 and again.line()
    assert (await read_keys_in_use(kv, keys)).ids() == ["k2"]
    check_keyring(await read_keys_in_use(kv, keys), Keyring([K2]))  # k1 may go now
    assert _leaks(await _values(kv, keys)) == []

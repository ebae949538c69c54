"""Encryption at rest on real etcd: a node with a keyring and a worker (HTTP, shell, handlers,
a checkpoint) leave no secret in etcd while the worker gets plaintext; a value that does not
decrypt is a dead letter, never dispatched; ``schedd node`` without the key, or with another
key of the same id, refuses to start; ``schedd keys rekey`` moves every record to a new key."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from jobs.conftest import Target

from integration.cluster_harness import SUCCEEDED, Harness, eventually, restart_node
from schedd.dev import free_port
from schedd.store import (
    KV,
    EncryptionKey,
    EtcdKV,
    Keyring,
    Keys,
    prefix_end,
    prepare_keyring,
    read_keys_in_use,
)
from schedd.store._envelope import key_id_of
from schedd.v1 import execution_pb2, job_pb2
from schedd.worker._http import HttpExecutor
from schedd.worker._shell import ShellConfig, ShellExecutor

pytestmark = pytest.mark.timeout(60)

SCHEDD = [sys.executable, "-m", "schedd.cli.schedd_main"]
K1 = EncryptionKey.generate("k1")
K2 = EncryptionKey.generate("k2")
PAYLOAD, HEADER, ENV = "PAYLOAD-5b1e77", "HEADER-9c2d31", "ENV-4f7a09"
CKPT, OVERRIDE = "CKPT-8e3b52", "OVERRIDE-2a6c64"
MARKERS = [m.encode() for m in (PAYLOAD, HEADER, ENV, CKPT, OVERRIDE)]


def keyring_file(path: Path, *keys: EncryptionKey) -> Path:
    path.write_text("".join(k.line() + "\n" for k in keys))
    path.chmod(0o600)
    return path


async def stored(etcd: KV, prefix: bytes) -> dict[bytes, bytes]:
    kvs, _ = await etcd.range_all(prefix, prefix_end(prefix))
    return {kv.key: kv.value for kv in kvs}


def leaks(values: dict[bytes, bytes]) -> list[tuple[bytes, bytes]]:
    return [(key, m) for key, value in values.items() for m in MARKERS if m in value]


async def test_the_store_holds_no_secret_and_the_worker_gets_plaintext(
    h_store: Harness, tmp_path: Path
) -> None:
    """On etcd, and on the embedded store, where no file of the store's directory nor of the
    node's data dir (its run history) may hold a secret either."""
    h = h_store
    node = await h.start_node(keyring=Keyring.from_file(keyring_file(tmp_path / "keys", K1)))
    target = Target()
    await target.start()
    got: dict[str, Any] = {}
    checkpointed, finish = asyncio.Event(), asyncio.Event()
    w = h.new_worker()

    @w.handler("keep")
    async def keep(ctx: Any, payload: Any) -> Any:
        got.setdefault("payloads", []).append(payload)
        raise RuntimeError("no, and every attempt is a dead letter")

    @w.handler("long")
    async def long(ctx: Any, payload: Any) -> Any:
        ctx.save_checkpoint({"at": CKPT})
        await ctx.heartbeat()
        checkpointed.set()
        await finish.wait()
        return "done"

    w.add_executor("http", HttpExecutor())
    w.add_executor("shell", ShellExecutor(ShellConfig()))
    h.workers.append((w, asyncio.create_task(w.run())))
    client = await h.connect()
    try:
        hook = job_pb2.HttpTarget(url=target.url("/hook"), headers={"X-Token": HEADER})
        cmd = job_pb2.ShellTarget(argv=["sh", "-c", 'printf %s "$TOKEN"'], env={"TOKEN": ENV})
        payload = {"k": PAYLOAD}
        ids = [
            (await client.create_job(name, schedule="@after 1s", payload=payload, **kw)).job.id
            for name, kw in (
                ("keep", {"handler": "keep", "max_attempts": 1}),
                ("long", {"handler": "long"}),
                ("hook", {"http": hook}),
                ("cmd", {"shell": cmd}),
            )
        ]
        await client.trigger_job(ids[0], payload={"k": OVERRIDE})
        await asyncio.wait_for(checkpointed.wait(), 15)
        dead = await eventually(
            lambda: client.list_dead_letters(job_id=ids[0]), lambda d: len(d) == 2, what="2 dead"
        )
        runs = await eventually(
            lambda: h.runs(ids[3]), lambda rs: bool(rs) and rs[0].state == SUCCEEDED, what="cmd"
        )
        await eventually(lambda: asyncio.sleep(0, target.seen), bool, what="the HTTP call")
        values = await eventually(  # the heartbeat's checkpoint reaches its ckpt/ key
            lambda: stored(node.kv, h.prefix),
            lambda v: any(k.startswith(h.prefix + b"ckpt/") for k in v),
            what="the checkpoint in the store",
        )
        dlq = [k for k in values if k.startswith(h.prefix + b"dlq/")]
        assert len(dlq) == 2 and len(values) > 10
        assert leaks(values) == []
        # What the worker got, and what the API returns, is plaintext.
        assert sorted(p["k"] for p in got["payloads"]) == [OVERRIDE, PAYLOAD]
        assert target.seen[0].headers["X-Token"] == HEADER
        assert PAYLOAD.encode() in target.seen[0].body
        assert json.loads(runs[0].result)["stdout"] == ENV  # the shell printed its env value
        assert {d.payload_override for d in dead} == {b"", f'{{"k":"{OVERRIDE}"}}'.encode()}
        [live] = [r for r in await h.runs(ids[1]) if r.state != SUCCEEDED]
        assert CKPT.encode() in live.checkpoint
        assert (await client.get_job(ids[2])).http.headers["X-Token"] == HEADER
        if h.endpoint.startswith("rocksdb:"):
            await h.close()  # everything flushed and closed: every byte is in the files
            assert _files_holding_secrets(tmp_path / "store", node.config.data_dir) == []
    finally:
        finish.set()
        await target.close()


def _files_holding_secrets(*dirs: Path) -> list[tuple[str, bytes]]:
    """Every (file, marker) where a file under ``dirs`` holds a marker's bytes."""
    found = []
    for d in dirs:
        for path in d.rglob("*"):
            if path.is_file():
                data = path.read_bytes()
                found += [(str(path), m) for m in MARKERS if m in data]
    return found


async def test_a_value_that_does_not_decrypt_is_never_dispatched(
    h: Harness, etcd: EtcdKV, tmp_path: Path
) -> None:
    await h.start_node(keyring=Keyring.from_file(keyring_file(tmp_path / "keys", K1)))
    w = await h.start_worker()
    del w
    client = await h.connect()
    job = (await client.create_job("t", schedule="@after 2s", handler="echo", payload=PAYLOAD)).job
    key = Keys(h.prefix).job_key(job.id)
    kv = await etcd.get(key)
    assert kv is not None
    spec = job_pb2.Job.FromString(kv.value)
    spec.payload = spec.payload[:-1] + bytes([spec.payload[-1] ^ 1])  # one bit of the tag
    await etcd.put(key, spec.SerializeToString())
    [dead] = await eventually(
        lambda: client.list_dead_letters(job_id=job.id), lambda d: len(d) == 1, what="a dead letter"
    )
    assert "job.payload: does not decrypt with key 'k1'" in dead.error, dead.error
    assert dead.state == execution_pb2.EXECUTION_DEAD
    await asyncio.sleep(max(0.0, (dead.scheduled_ms + 300) / 1000 - time.time()))
    assert "echo" not in h.calls  # not run at its instant either: never sent, not even held


async def _node(etcd_endpoint: str, prefix: bytes, data: Path, *args: str) -> tuple[int, str]:
    """Runs ``schedd node`` until it exits (it must, at once); its status and output."""
    proc = await asyncio.create_subprocess_exec(
        *SCHEDD, "node", "--etcd", etcd_endpoint, "--listen", f"127.0.0.1:{free_port()}",
        "--data-dir", str(data), "--partitions", "4", "--prefix", prefix.decode(), *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
        env={**os.environ, "SCHEDD_ENCRYPTION_KEYS": ""},
    )  # fmt: skip
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), 30)
    except TimeoutError:
        proc.kill()
        raise
    return proc.returncode or 0, out.decode()


async def test_schedd_node_without_the_key_refuses_to_start(
    etcd_server: Any, etcd: EtcdKV, etcd_prefix: bytes, tmp_path: Path
) -> None:
    await prepare_keyring(etcd, Keys(etcd_prefix), Keyring([K1]))  # a node with k1 ran here
    wrong = keyring_file(tmp_path / "wrong", EncryptionKey.generate("k1"))
    (none_code, none_out), (wrong_code, wrong_out) = await asyncio.gather(
        _node(etcd_server.endpoint, etcd_prefix, tmp_path / "a"),
        _node(etcd_server.endpoint, etcd_prefix, tmp_path / "b", "--encryption-keys", str(wrong)),
    )
    assert none_code == 5 and wrong_code == 5, (none_out, wrong_out)
    assert none_out.strip().splitlines()[-1] == (
        "schedd node: the cluster's records are encrypted (key 'k1') and no keyring was given:"
        " give it with --encryption-keys FILE (or SCHEDD_ENCRYPTION_KEYS)"
    )
    assert wrong_out.strip().splitlines()[-1] == (
        f"schedd node: key 'k1' in the keyring {wrong} is not the key the cluster's records are"
        " encrypted with (its canary does not decrypt): fix the file given with"
        " --encryption-keys FILE (or SCHEDD_ENCRYPTION_KEYS)"
    )
    assert "Traceback" not in none_out + wrong_out
    assert not await etcd.get(Keys(etcd_prefix).owner_key(0))  # it owned nothing


async def test_rekey_moves_every_record_to_the_new_key(
    h: Harness, etcd: EtcdKV, tmp_path: Path
) -> None:
    path = keyring_file(tmp_path / "keys", K1)
    await h.start_node(keyring=Keyring.from_file(path))
    await h.start_worker()
    client = await h.connect()
    job = (await client.create_job("t", schedule="@every 1s", handler="echo", payload=PAYLOAD)).job
    parked = (await client.create_job("p", schedule="@every 1h", handler="echo", payload=CKPT)).job
    await eventually(lambda: h.runs(job.id), lambda rs: any(r.state == SUCCEEDED for r in rs))

    def key_ids(values: dict[bytes, bytes]) -> set[str]:
        jobs = [v for k, v in values.items() if k.startswith(h.prefix + b"jobs/")]
        return {key_id_of(job_pb2.Job.FromString(v).payload) for v in jobs}

    assert key_ids(await stored(etcd, h.prefix)) == {"k1"}
    # Rotation: the new key goes last in the file, the node restarts with it, then rekey.
    keyring_file(path, K1, K2)
    address = h.nodes[0].address  # the worker and the client come back to it
    await restart_node(h, 0, listen=address, keyring=Keyring.from_file(path))
    proc = await asyncio.create_subprocess_exec(
        *SCHEDD, "keys", "rekey", "--etcd", h.endpoint, "--prefix", h.prefix.decode(),
        "--encryption-keys", str(path), stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    _, err = await asyncio.wait_for(proc.communicate(), 30)
    summary = err.decode().strip().splitlines()[-1]
    assert proc.returncode == 0, err.decode()
    assert summary.startswith("rekey: ") and "keys no longer in use: k1" in summary, summary
    values = await stored(etcd, h.prefix)
    assert key_ids(values) == {"k2"} and leaks(values) == []
    assert (await read_keys_in_use(etcd, Keys(h.prefix))).ids() == ["k2"]
    # k1 may leave the file now: a node with k2 alone starts and runs everything.
    keyring_file(path, K2)
    node = await restart_node(h, 0, listen=address, keyring=Keyring.from_file(path))
    since = node.clock.now_ms()
    await eventually(
        lambda: h.runs(job.id),
        lambda rs: any(r.state == SUCCEEDED and r.scheduled_ms > since for r in rs),
        what="a fire after the restart",
    )
    assert (await client.get_job(parked.id)).payload == f'"{CKPT}"'.encode()
    assert [c for c in h.calls["echo"] if c[0].startswith(job.id)]

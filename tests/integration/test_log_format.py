"""`schedd --log-format json node`: a real node process against the real etcd writes nothing
but JSON objects on stderr, from its start to its graceful stop, with its ids as fields."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import signal
import sys
from pathlib import Path
from typing import Any

import pytest

from schedd._errors import SchedError
from schedd.client import AsyncClient
from schedd.dev import EtcdProcess, free_port

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

PARTITIONS = 4
NODE_ID = "json-node"
ISO_UTC_MS = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")


async def _owns_everything(address: str) -> bool:
    try:
        async with AsyncClient(address, timeout_s=5) as client:
            status = await client.cluster_status()
    except SchedError:  # still starting
        return False
    owners = [p.owner for p in status.partitions]
    return len(owners) == PARTITIONS and set(owners) == {NODE_ID}


async def test_a_node_logs_only_json_objects_with_its_ids(
    etcd_server: EtcdProcess, etcd_prefix: bytes, tmp_path: Path
) -> None:
    address = f"127.0.0.1:{free_port()}"
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "schedd.cli.schedd_main", "--log-format", "json",
        "node", "--etcd", etcd_server.endpoint, "--prefix", etcd_prefix.decode(),
        "--listen", address, "--node-id", NODE_ID, "--data-dir", str(tmp_path / "data"),
        "--partitions", str(PARTITIONS),
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert proc.stderr is not None
    lines: list[str] = []

    async def read() -> None:
        assert proc.stderr is not None
        async for raw in proc.stderr:
            lines.append(raw.decode())

    reader = asyncio.create_task(read())
    try:
        loaded = 0
        async with asyncio.timeout(60):
            while loaded < PARTITIONS or not await _owns_everything(address):
                assert proc.returncode is None, "".join(lines)
                await asyncio.sleep(0.1)
                loaded = sum(": loaded " in ln for ln in lines)
        proc.send_signal(signal.SIGTERM)
        async with asyncio.timeout(30):
            assert await proc.wait() == 0, "".join(lines)
            await reader
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        reader.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await reader

    objects: list[dict[str, Any]] = []
    for line in lines:
        assert line.endswith("\n"), line
        try:
            obj = json.loads(line)
        except ValueError:
            pytest.fail(f"a line that is not JSON: {line!r}\n{''.join(lines)}")
        assert isinstance(obj, dict), line
        assert {"ts", "level", "logger", "event"} <= set(obj), line
        assert ISO_UTC_MS.match(obj["ts"]), line
        assert obj["level"] in ("debug", "info", "warning", "error", "critical"), line
        assert obj["node"] == NODE_ID, line  # the process's own field, on every line
        objects.append(obj)

    def events(fragment: str) -> list[dict[str, Any]]:
        return [o for o in objects if fragment in o["event"]]

    loaded_lines = events(": loaded ")
    assert sorted(o["partition"] for o in loaded_lines) == list(range(PARTITIONS)), loaded_lines
    assert all(o["event"].startswith(f"partition {o['partition']}: loaded") for o in loaded_lines)
    assert all(o["logger"] == "schedd.node._partition" for o in loaded_lines)
    (listening,) = events("listening on")
    assert listening["event"] == f"schedd node {NODE_ID} listening on {address}"
    claimed = events(f"node {NODE_ID} claimed")
    assert sorted(p for o in claimed for p in o["partitions"]) == list(range(PARTITIONS))
    # The graceful stop: every partition released, with its number as a field.
    released = [o for o in events(" released (shutdown)") if o["event"].startswith("partition ")]
    assert sorted(o["partition"] for o in released) == list(range(PARTITIONS)), released
    (gave_up,) = events(f"node {NODE_ID} released")
    assert gave_up["partitions"] == list(range(PARTITIONS))

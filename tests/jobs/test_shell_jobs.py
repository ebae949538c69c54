"""Shell jobs end to end: real etcd, a real `schedd node` and `schedd worker` process. argv
without a shell, env, cwd, stdin, output in the result, exit codes, the timeout killing the
whole process group, and the worker's refusals (--allow-shell, --shell-allow)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from jobs.conftest import KindsCluster
from jobs.test_http_jobs import ctl, finished

from integration.cluster_harness import eventually
from schedd.v1 import execution_pb2, job_pb2

WAITING = (execution_pb2.EXECUTION_PENDING, execution_pb2.EXECUTION_DISPATCHED)
pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]


SCRIPT = "sh -c 'echo \"$GREETING from $(pwd) as $SCHEDD_EXECUTION_ID\"; cat; echo warn >&2'"


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ", 1)[1][0] != "Z"  # a zombie has exited
    except (FileNotFoundError, IndexError):
        return False


async def shell_job(c: KindsCluster, name: str, argv: list[str], **kw: object) -> str:
    kw.setdefault("schedule", "@after 1s")
    cwd = str(kw.pop("cwd", ""))
    env = dict(kw.pop("env", {}))  # type: ignore[call-overload]
    target = job_pb2.ShellTarget(argv=argv, cwd=cwd, env=env)
    res = await c.client.create_job(name, shell=target, **kw)  # type: ignore[arg-type]
    return res.job.id


async def test_shell_jobs_run_report_and_are_killed_on_timeout(
    kinds: KindsCluster, tmp_path: Path
) -> None:
    await kinds.start("--allow-shell", "--shell-kill-grace", "1")
    work = tmp_path / "work"
    work.mkdir()
    code, out, err = await ctl(
        kinds, "job", "create", "greet", "--schedule", "@after 1s",
        "--shell", SCRIPT,
        "--cwd", str(work), "--env", "GREETING=hi", "--payload", '{"x": 1}', "-o", "json",
    )  # fmt: skip
    assert code == 0, err
    greet = json.loads(out)["id"]
    failing = await shell_job(
        kinds, "failing", ["sh", "-c", "echo first >&2; echo nope >&2; exit 3"], max_attempts=2
    )
    pids = tmp_path / "pids"
    stuck = await shell_job(
        kinds, "stuck",
        ["sh", "-c", f"echo $$ > {pids}; sleep 60 & echo $! >> {pids}; trap '' TERM; wait"],
        timeout="2s", max_attempts=1,
    )  # fmt: skip

    run = await finished(kinds, greet)
    assert run.state == execution_pb2.EXECUTION_SUCCEEDED, run
    code, out, err = await ctl(kinds, "run", "get", run.id, "-o", "json")
    assert code == 0, err
    result = json.loads(out)["result"]
    assert result["exit_code"] == 0 and result["truncated"] is False
    assert result["stdout"] == f"hi from {work} as {run.id}\n" + '{"x":1}'
    assert result["stderr"] == "warn\n"

    r = await finished(kinds, failing)
    assert r.state == execution_pb2.EXECUTION_DEAD and r.attempt == 2, r
    assert r.error == "exit code 3: nope"
    assert json.loads(r.result)["stderr"] == "first\nnope\n"

    r = await finished(kinds, stuck)
    assert r.state == execution_pb2.EXECUTION_DEAD and r.attempt == 1, r
    assert "deadline" in r.error, r.error
    group = [int(p) for p in pids.read_text().split()]
    assert len(group) == 2
    await eventually(
        lambda: asyncio.sleep(0, [p for p in group if _alive(p)]),
        lambda left: not left,
        timeout=10,
        what="the timed-out job's processes (SIGTERM ignored) to be killed",
    )


async def test_shell_allow_list(kinds: KindsCluster) -> None:
    await kinds.start("--allow-shell", "--shell-allow", "echo")
    ok = await shell_job(kinds, "echo", ["echo", "allowed"])
    refused = await shell_job(kinds, "sh", ["sh", "-c", "echo sneaky"])
    run = await finished(kinds, ok)
    assert run.state == execution_pb2.EXECUTION_SUCCEEDED
    assert json.loads(run.result)["stdout"] == "allowed\n"
    r = await finished(kinds, refused)
    assert r.state == execution_pb2.EXECUTION_DEAD and r.attempt == 1, r
    assert "executable 'sh' is not in the worker's --shell-allow list" in r.error


async def test_a_worker_without_allow_shell_never_runs_shell_jobs(
    kinds: KindsCluster, tmp_path: Path
) -> None:
    target = await kinds.target()
    await kinds.start()  # HTTP on, shell off
    marker = tmp_path / "ran"
    shell = await shell_job(kinds, "touch", ["touch", str(marker)])
    http = (await kinds.client.create_job("ping", schedule="@after 1s", http=target.url())).job.id
    assert (await finished(kinds, http)).state == execution_pb2.EXECUTION_SUCCEEDED
    await asyncio.sleep(2)
    runs = await kinds.runs(shell)  # waiting for a worker that runs shell jobs: unstarted
    assert len(runs) == 1 and runs[0].state in WAITING, runs
    assert runs[0].started_ms == 0 and not runs[0].worker_id
    assert not marker.exists()
    code, _, err = await ctl(kinds, "job", "create", "bad", "--schedule", "@after 1s",
                             "--shell", "true", "--method", "GET")  # fmt: skip
    assert code != 0 and "--method, --header and --success-code need --http" in err
    assert "Traceback" not in err

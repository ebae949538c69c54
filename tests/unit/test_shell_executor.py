"""The shell executor: what a job runs with, what it reports, and that it leaves nothing behind.

These run real processes (sh, python), which is the executor's job.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

from schedd.v1 import job_pb2, worker_pb2
from schedd.worker._context import Context
from schedd.worker._executor import Outcome, Runtime, settle
from schedd.worker._shell import ShellConfig, ShellExecutor

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux only")

SH = shutil.which("sh") or "/bin/sh"


def _dispatch(
    argv: list[str], cwd: str = "", env: dict[str, str] | None = None, payload: bytes = b""
) -> worker_pb2.Dispatch:
    target = job_pb2.Job(shell=job_pb2.ShellTarget(argv=argv, cwd=cwd, env=env or {}))
    return worker_pb2.Dispatch(
        execution_id="ex-1",
        job_id="job-1",
        tenant="acme",
        scheduled_ms=1_700_000_000_000,
        attempt=2,
        fencing_token=7,
        payload=payload,
        target=target.SerializeToString(),
    )


def _begin(executor: ShellExecutor, d: worker_pb2.Dispatch) -> Outcome | asyncio.Future[Any]:
    runtime = Runtime(asyncio.get_running_loop(), None)  # type: ignore[arg-type]
    return executor.begin(Context(d, ledger=None), None, runtime)  # type: ignore[arg-type]


async def _run(executor: ShellExecutor, d: worker_pb2.Dispatch) -> Outcome:
    started = _begin(executor, d)
    if isinstance(started, Outcome):
        return started
    await asyncio.wait([started])
    return settle(started)


def _output(outcome: Outcome) -> dict[str, Any]:
    out: dict[str, Any] = json.loads(outcome.output)
    return out


def _running(pid: int) -> bool:
    """Whether ``pid`` is a live process (a zombie waiting for a reaper is not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except FileNotFoundError:
        return False
    return stat[stat.rfind(b")") + 2 :].split()[0] not in (b"Z", b"X")


async def _pids(path: Path) -> list[int]:
    """The pids a job wrote to ``path`` (written whole with a rename), once it did."""
    for _ in range(1000):
        if path.exists():
            return [int(p) for p in path.read_text().split()]
        await asyncio.sleep(0.01)
    raise AssertionError(f"the job never wrote {path}")


def _record_pids(path: Path, *commands: str) -> str:
    """A script that starts ``commands`` in the background, writes their pids and its own
    to ``path`` (atomically), then waits for them."""
    starts = "".join(f"{c} & echo $! >> {path}.tmp; " for c in commands)
    return f"{starts}echo $$ >> {path}.tmp; mv {path}.tmp {path}; wait"


# ---- what a job sees and what it reports --------------------------------------------------------


async def test_success_captures_stdout_with_env_cwd_and_payload(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SCHEDD_TEST_WORKER_ONLY", "secret")
    script = (
        "import json, os, sys; print(json.dumps("
        "{'cwd': os.getcwd(), 'stdin': sys.stdin.read(), 'env': dict(os.environ)}))"
    )
    d = _dispatch(
        [sys.executable, "-c", script],
        cwd=str(tmp_path),
        env={"FOO": "bar baz", "SCHEDD_JOB_ID": "forged"},
        payload=b'{"n": 1}',
    )
    outcome = await _run(ShellExecutor(), d)
    assert outcome.code == worker_pb2.OUTCOME_SUCCEEDED, outcome.error
    out = _output(outcome)
    assert out["exit_code"] == 0 and out["stderr"] == "" and out["truncated"] is False
    assert out["stdout_bytes"] == len(out["stdout"].encode()) and out["stderr_bytes"] == 0
    assert isinstance(out["duration_ms"], int) and out["duration_ms"] >= 0
    seen = json.loads(out["stdout"])
    assert seen["cwd"] == str(tmp_path)
    assert seen["stdin"] == '{"n": 1}'
    env = seen["env"]
    assert env["FOO"] == "bar baz"
    assert {k: v for k, v in env.items() if k.startswith("SCHEDD_")} == {
        "SCHEDD_EXECUTION_ID": "ex-1",
        "SCHEDD_JOB_ID": "job-1",  # the job's env cannot override these
        "SCHEDD_TENANT": "acme",
        "SCHEDD_ATTEMPT": "2",
        "SCHEDD_FENCING_TOKEN": "7",
        "SCHEDD_SCHEDULED_MS": "1700000000000",
    }
    assert env["PATH"] == os.environ["PATH"]
    assert "SCHEDD_TEST_WORKER_ONLY" not in env  # only PATH, HOME, LANG, LC_ALL, TZ


async def test_inherit_env_passes_the_workers_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SCHEDD_TEST_WORKER_ONLY", "shared")
    d = _dispatch([SH, "-c", 'printf %s "$SCHEDD_TEST_WORKER_ONLY"'])
    outcome = await _run(ShellExecutor(ShellConfig(inherit_env=True)), d)
    assert outcome.code == worker_pb2.OUTCOME_SUCCEEDED
    assert _output(outcome)["stdout"] == "shared"


async def test_non_zero_exit_fails_with_the_last_stderr_line() -> None:
    script = "echo out; echo first >&2; echo '  boom: it broke  ' >&2; echo >&2; exit 3"
    outcome = await _run(ShellExecutor(), _dispatch([SH, "-c", script]))
    assert outcome.code == worker_pb2.OUTCOME_FAILED
    assert outcome.error == "exit code 3: boom: it broke"
    out = _output(outcome)
    assert out["exit_code"] == 3 and out["stdout"] == "out\n"
    assert out["stderr"] == "first\n  boom: it broke  \n\n"
    assert out["stderr_bytes"] == len(out["stderr"]) and out["truncated"] is False


async def test_the_error_line_is_cut_at_200_chars_and_absent_without_stderr() -> None:
    long = await _run(ShellExecutor(), _dispatch([SH, "-c", "printf '%0300d' 0 >&2; exit 1"]))
    assert long.error == "exit code 1: " + "0" * 200
    silent = await _run(ShellExecutor(), _dispatch([SH, "-c", "exit 4"]))
    assert (silent.code, silent.error) == (worker_pb2.OUTCOME_FAILED, "exit code 4")


async def test_output_is_truncated_without_blocking_the_child() -> None:
    script = (
        "import sys; sys.stdout.buffer.write(b'a' * 1_000_000); "
        "sys.stderr.buffer.write(b'e' * 300_000 + b'\\nlast words\\n'); sys.exit(1)"
    )
    executor = ShellExecutor(ShellConfig(output_limit=1000))
    outcome = await _run(executor, _dispatch([sys.executable, "-c", script]))
    assert outcome.code == worker_pb2.OUTCOME_FAILED
    assert outcome.error == "exit code 1: last words"  # from the end of stderr, not the kept head
    out = _output(outcome)
    assert out["stdout"] == "a" * 1000 and out["stdout_bytes"] == 1_000_000
    assert out["stderr"] == "e" * 1000 and out["stderr_bytes"] == 300_000 + len("\nlast words\n")
    assert out["truncated"] is True


async def test_a_payload_the_child_never_reads_does_not_hang() -> None:
    outcome = await _run(ShellExecutor(), _dispatch(["true"], payload=b"x" * 1_000_000))
    assert outcome.code == worker_pb2.OUTCOME_SUCCEEDED
    assert _output(outcome)["exit_code"] == 0


async def test_killed_by_a_signal() -> None:
    outcome = await _run(ShellExecutor(), _dispatch([SH, "-c", "echo partial; kill -KILL $$"]))
    assert outcome.code == worker_pb2.OUTCOME_FAILED
    assert outcome.error == "killed by signal 9 (SIGKILL)"
    out = _output(outcome)
    assert out["exit_code"] == -9 and out["stdout"] == "partial\n"


# ---- refused before anything starts ---------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "cwd", "error"),
    [
        ([], "", "shell: argv is empty"),
        (["no-such-program-xyz"], "", "shell: executable 'no-such-program-xyz' not found on PATH"),
        (["/no/such/program"], "", "shell: executable '/no/such/program' does not exist"),
        (["true"], "/no/such/dir", "shell: cwd /no/such/dir does not exist"),
        (["true"], "relative/dir", "shell: cwd 'relative/dir' is not an absolute path"),
        (["true"], "/etc/hostname", "shell: cwd /etc/hostname is not a directory"),
    ],
)
async def test_unusable_targets_fail_permanently_at_once(
    argv: list[str], cwd: str, error: str
) -> None:
    got = _begin(ShellExecutor(), _dispatch(argv, cwd=cwd))
    assert got == Outcome(worker_pb2.OUTCOME_FAILED_PERMANENT, error=error)


async def test_a_file_without_execute_permission_is_refused(tmp_path: Path) -> None:
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/sh\necho hi\n")
    script.chmod(0o644)
    got = _begin(ShellExecutor(), _dispatch([str(script)]))
    assert got == Outcome(
        worker_pb2.OUTCOME_FAILED_PERMANENT,
        error=f"shell: executable '{script}' is not executable (permission denied)",
    )


async def test_an_exec_failure_at_spawn_fails_permanently(tmp_path: Path) -> None:
    script = tmp_path / "no-shebang"
    script.write_text("echo hi\n")  # executable, but not a format the kernel runs
    script.chmod(0o755)
    outcome = await _run(ShellExecutor(), _dispatch([str(script)]))
    assert outcome == Outcome(
        worker_pb2.OUTCOME_FAILED_PERMANENT,
        error=f"shell: cannot execute '{script}': Exec format error",
    )


def _fake_ls(directory: Path, marker: Path) -> Path:
    directory.mkdir()
    fake = directory / "ls"
    fake.write_text(f"#!/bin/sh\ntouch {marker}\n")
    fake.chmod(0o755)
    return fake


async def test_the_allow_list_refuses_other_programs_and_runs_nothing(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    executor = ShellExecutor(ShellConfig(allowed=("true", "ls")))
    got = _begin(executor, _dispatch([SH, "-c", f"touch {marker}"]))
    assert got == Outcome(
        worker_pb2.OUTCOME_FAILED_PERMANENT,
        error=f"shell: executable '{SH}' is not in the worker's --shell-allow list",
    )
    _fake_ls(tmp_path / "x", marker)
    (tmp_path / "y").mkdir()
    # A relative path to another "ls", and "ls" found through a PATH the job set, are not "ls".
    for d in (
        _dispatch(["../x/ls"], cwd=str(tmp_path / "y")),
        _dispatch(["ls"], env={"PATH": str(tmp_path / "x")}),
        _dispatch(["ls"], env={"PATH": f"x:{os.environ['PATH']}"}, cwd=str(tmp_path)),
    ):
        got = _begin(executor, d)
        assert isinstance(got, Outcome) and got.code == worker_pb2.OUTCOME_FAILED_PERMANENT
        assert "is not in the worker's --shell-allow list" in got.error
    assert not marker.exists()


async def test_the_allow_list_runs_the_workers_program(tmp_path: Path) -> None:
    ls = shutil.which("ls")
    assert ls is not None
    by_name = ShellExecutor(ShellConfig(allowed=("ls",)))
    outcome = await _run(by_name, _dispatch(["ls", "-d", str(tmp_path)]))
    assert outcome.code == worker_pb2.OUTCOME_SUCCEEDED, outcome.error
    assert _output(outcome)["stdout"] == f"{tmp_path}\n"

    by_path = ShellExecutor(ShellConfig(allowed=(ls,)))
    folded = os.path.join(os.path.dirname(ls), "..", os.path.basename(os.path.dirname(ls)), "ls")
    for argv0 in ("ls", ls, folded):
        outcome = await _run(by_path, _dispatch([argv0, "-d", "/"]))
        assert outcome.code == worker_pb2.OUTCOME_SUCCEEDED, (argv0, outcome.error)
    refused = _begin(by_path, _dispatch(["true"]))
    assert isinstance(refused, Outcome) and refused.code == worker_pb2.OUTCOME_FAILED_PERMANENT


async def test_the_allow_list_refuses_loader_variables() -> None:
    executor = ShellExecutor(ShellConfig(allowed=("true",)))
    got = _begin(executor, _dispatch(["true"], env={"LD_PRELOAD": "/tmp/evil.so"}))
    assert got == Outcome(
        worker_pb2.OUTCOME_FAILED_PERMANENT,
        error="shell: env LD_PRELOAD is refused: the worker restricts executables (--shell-allow)",
    )


# ---- cancellation and leftovers ---------------------------------------------------------------


async def test_cancel_stops_the_whole_process_group(tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    script = _record_pids(pids, "sleep 30", "sleep 30")
    task = _begin(ShellExecutor(ShellConfig(kill_grace_s=10.0)), _dispatch([SH, "-c", script]))
    assert isinstance(task, asyncio.Future)
    group = await _pids(pids)
    assert len(group) == 3 and all(_running(p) for p in group)
    loop = asyncio.get_running_loop()
    cancelled_at = loop.time()
    task.cancel()
    await asyncio.wait([task])
    assert settle(task).code == worker_pb2.OUTCOME_CANCELLED
    assert loop.time() - cancelled_at < 5.0  # SIGTERM sufficed: no wait for the 10 s grace
    assert not [p for p in group if _running(p)]


async def test_a_group_that_ignores_sigterm_is_killed_after_the_grace(tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    script = "trap '' TERM; " + _record_pids(pids, "sleep 30")
    task = _begin(ShellExecutor(ShellConfig(kill_grace_s=0.3)), _dispatch([SH, "-c", script]))
    assert isinstance(task, asyncio.Future)
    group = await _pids(pids)
    loop = asyncio.get_running_loop()
    cancelled_at = loop.time()
    task.cancel()
    await asyncio.wait([task])
    assert settle(task).code == worker_pb2.OUTCOME_CANCELLED
    assert loop.time() - cancelled_at >= 0.3  # the grace was given before SIGKILL
    assert not [p for p in group if _running(p)]


async def test_a_second_cancel_skips_the_rest_of_the_grace(tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    script = "trap '' TERM; " + _record_pids(pids, "sleep 30")
    task = _begin(ShellExecutor(ShellConfig(kill_grace_s=30.0)), _dispatch([SH, "-c", script]))
    assert isinstance(task, asyncio.Future)
    group = await _pids(pids)
    task.cancel()
    await asyncio.sleep(0.1)  # in the grace now
    task.cancel()
    await asyncio.wait_for(asyncio.wait([task]), 10.0)
    assert task.cancelled()
    assert not [p for p in group if _running(p)]


async def test_background_processes_holding_the_pipes_do_not_hang_the_attempt(
    tmp_path: Path,
) -> None:
    pids = tmp_path / "pids"
    script = f"sleep 30 & echo $! > {pids}; echo done"  # the sleep keeps stdout and stderr open
    outcome = await asyncio.wait_for(_run(ShellExecutor(), _dispatch([SH, "-c", script])), 10.0)
    assert outcome.code == worker_pb2.OUTCOME_SUCCEEDED
    assert _output(outcome)["stdout"] == "done\n"
    assert not [p for p in await _pids(pids) if _running(p)]


async def test_background_processes_do_not_outlive_the_job(tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    script = f"sleep 30 </dev/null >/dev/null 2>&1 & echo $! > {pids}"
    outcome = await asyncio.wait_for(_run(ShellExecutor(), _dispatch([SH, "-c", script])), 10.0)
    assert outcome.code == worker_pb2.OUTCOME_SUCCEEDED
    assert not [p for p in await _pids(pids) if _running(p)]


async def test_a_task_cancelled_before_it_runs_starts_nothing(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    task = _begin(ShellExecutor(), _dispatch([SH, "-c", f"touch {marker}"]))
    assert isinstance(task, asyncio.Future)
    task.cancel()
    await asyncio.wait([task])
    assert settle(task).code == worker_pb2.OUTCOME_CANCELLED
    assert not marker.exists()

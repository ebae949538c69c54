"""The executor of shell jobs: runs a job's ``argv`` as a child process of the worker.

A shell job's target is a ``schedd.v1.ShellTarget`` (``argv``, ``cwd``, ``env``). An attempt
execs ``argv`` (no shell: nothing is split, expanded or globbed), writes the payload bytes to
its stdin and closes it, captures stdout and stderr, and ends as

* SUCCEEDED on exit code 0, FAILED on another exit code (``"exit code N: <the last non-empty
  stderr line>"``) or when killed by a signal (``"killed by signal N (SIGxxx)"``); the output
  is compact UTF-8 JSON: ``{"exit_code", "duration_ms", "stdout", "stderr", "stdout_bytes",
  "stderr_bytes", "truncated"}`` (``exit_code`` is ``-N`` after signal N; ``stdout`` and
  ``stderr`` hold the first ``output_limit`` bytes of each, decoded with replacement;
  ``*_bytes`` count everything the job wrote; ``truncated`` says some was dropped);
* FAILED_PERMANENT, with nothing started, when the target is unusable: empty argv, a ``cwd``
  that is relative, missing or not a directory, an invalid env name, an executable that is
  not found, not executable or not allowed; also when the exec itself fails for good (not
  found, permission denied, exec format error).

Safety rules:

* **What runs.** ``argv[0]`` is resolved once, before the start: a name with a ``/`` against
  the job's ``cwd`` (lexically: ``.``, ``..`` and repeated slashes are folded, symlinks are
  not followed), a bare name through the ``PATH`` the job will see (``shutil.which``). That
  absolute path is what is exec'd (``argv[0]`` is passed to the program as written), so the
  file checked is the file run.
* **Allow-list** (``ShellConfig.allowed``, the worker's ``--shell-allow``; empty: any). An
  entry with a ``/`` allows exactly that path (normalized the same way; a symlink is allowed
  by its own path, not by its target's). A bare entry (``ls``) allows an ``argv[0]`` whose
  basename is that name and that resolves to a file of that name in a directory of the
  worker's own ``PATH`` (read when the executor is made; relative entries ignored). So
  ``../x/ls``, or ``ls`` found through a ``PATH`` the job set, does not pass as ``ls``
  unless it is the worker's ``ls``. While an allow-list is in force the job may not set
  ``LD_*`` variables (``LD_PRELOAD`` would run other code inside an allowed program). The
  list limits which program starts, not what it does with its arguments: allowing an
  interpreter (``sh``, ``python3``) allows anything.
* **Environment.** Only ``PATH``, ``HOME``, ``LANG``, ``LC_ALL`` and ``TZ`` of the worker
  (those set) unless ``inherit_env``; then the job's ``env``; then ``SCHEDD_EXECUTION_ID``,
  ``SCHEDD_JOB_ID``, ``SCHEDD_TENANT``, ``SCHEDD_ATTEMPT``, ``SCHEDD_FENCING_TOKEN`` and
  ``SCHEDD_SCHEDULED_MS``, which the job cannot override.
* **Process group.** The child leads a new session and process group; its descendants stay in
  it unless they leave it themselves (``setsid``: use cgroups for containment against that).
  When the attempt is cancelled (timeout, Cancel, shutdown) the group gets SIGTERM (and
  SIGCONT, so stopped members see it), then ``kill_grace_s`` to be gone, then SIGKILL; the
  child is reaped and the cancellation re-raised. Further cancellations meanwhile skip the
  rest of the grace. Keep ``kill_grace_s`` under the worker's 5 s cancel grace.
* **No leftovers.** When the child exits, members of its group still running are stopped the
  same way (background processes do not outlive the job), and pipes still held open by such
  processes get at most 1 s before they are, so an attempt never hangs on them.
* **Bounded memory.** Output beyond ``output_limit`` bytes per stream is read and dropped (the
  child never blocks on a full pipe); the error line comes from the last 4 KiB of stderr.

Linux only (process groups, ``/proc``). A group whose members all exited may in theory see its
id reused by a new process between the check and the signal; the signals are only sent while
the group is seen alive, which keeps that window to microseconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import json
import os
import shutil
import signal
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from schedd.v1 import job_pb2, worker_pb2
from schedd.worker._context import Context
from schedd.worker._executor import Outcome, Runtime, error_text

#: Worker variables a job sees unless ``inherit_env``.
BASE_ENV: Final = ("PATH", "HOME", "LANG", "LC_ALL", "TZ")
#: How long pipes held open by leftovers of an exited child are waited for, per step.
_PIPE_GRACE_S: Final = 1.0
#: How long a SIGKILLed group gets to be gone (it always is, unless in uninterruptible I/O).
_REAP_S: Final = 2.0
#: How often a group's liveness is checked while waiting for it.
_POLL_S: Final = 0.02
#: Bytes of the end of stderr kept for the error line.
_TAIL_BYTES: Final = 4096
_ERROR_LINE_CHARS: Final = 200
#: Exec failures that a retry cannot fix (anything else, e.g. EAGAIN or ENOMEM, may pass).
_PERMANENT_ERRNOS: Final = frozenset(
    {
        errno.ENOENT,
        errno.EACCES,
        errno.EPERM,
        errno.ENOEXEC,
        errno.ENOTDIR,
        errno.EISDIR,
        errno.ELOOP,
        errno.ENAMETOOLONG,
        errno.E2BIG,
    }
)
_JSON: Final = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)


@dataclass(frozen=True, slots=True)
class ShellConfig:
    """How a worker runs shell jobs (see the module docstring for the rules)."""

    #: Executables that may run (empty: any). ``/...`` entries: that exact path; bare names:
    #: that program on the worker's PATH.
    allowed: tuple[str, ...] = ()
    #: After SIGTERM to the process group, SIGKILL after this many seconds.
    kill_grace_s: float = 3.0
    #: Bytes kept of stdout and of stderr, each.
    output_limit: int = 4 * 1024
    #: Pass the worker's whole environment (else only PATH, HOME, LANG, LC_ALL, TZ if set).
    inherit_env: bool = False

    def __post_init__(self) -> None:
        if self.kill_grace_s < 0:
            raise ValueError(f"kill_grace_s must be >= 0, not {self.kill_grace_s}")
        if self.output_limit < 0:
            raise ValueError(f"output_limit must be >= 0, not {self.output_limit}")
        for entry in self.allowed:
            if not entry or "\0" in entry:
                raise ValueError(f"invalid --shell-allow entry {entry!r}")


class _Refused(Exception):
    """A shell target that cannot run: the message is the attempt's error."""


@dataclass(frozen=True, slots=True)
class _Launch:
    """A checked shell target, ready to exec."""

    argv: list[str]
    executable: str
    cwd: str | None
    env: dict[str, str]
    stdin: bytes


class _Capture(asyncio.SubprocessProtocol):
    """Collects a child's output (bounded) and says when it exited and its pipes closed."""

    def __init__(self, loop: asyncio.AbstractEventLoop, limit: int) -> None:
        self.limit = limit
        self.out = bytearray()
        self.err = bytearray()
        self.err_tail = bytearray()
        self.out_bytes = 0
        self.err_bytes = 0
        self.exited: asyncio.Future[None] = loop.create_future()
        #: Both stdout and stderr reached EOF (or were closed).
        self.drained: asyncio.Future[None] = loop.create_future()
        self._open = 2

    def pipe_data_received(self, fd: int, data: bytes) -> None:
        if fd == 1:
            self.out_bytes += len(data)
            kept = self.out
        elif fd == 2:
            self.err_bytes += len(data)
            kept = self.err
            self.err_tail += data[-_TAIL_BYTES:]
            del self.err_tail[:-_TAIL_BYTES]
        else:
            return
        room = self.limit - len(kept)
        if room > 0:
            kept += data[:room]

    def pipe_connection_lost(self, fd: int, exc: Exception | None) -> None:
        if fd in (1, 2):
            self._open -= 1
            if self._open == 0 and not self.drained.done():
                self.drained.set_result(None)

    def process_exited(self) -> None:
        if not self.exited.done():
            self.exited.set_result(None)


class ShellExecutor:
    """Runs shell jobs: an :class:`~schedd.worker._executor.Executor` (module docstring)."""

    __slots__ = ("_config", "_worker_path")

    def __init__(self, config: ShellConfig | None = None) -> None:
        self._config = config if config is not None else ShellConfig()
        #: The worker's PATH directories, for bare allow-list entries.
        self._worker_path = frozenset(
            os.path.normpath(d) for d in os.get_exec_path() if os.path.isabs(d)
        )

    def begin(self, ctx: Context, payload: Any, runtime: Runtime) -> Outcome | asyncio.Future[Any]:
        try:
            launch = self._prepare(ctx)
        except _Refused as e:
            return Outcome(worker_pb2.OUTCOME_FAILED_PERMANENT, error=f"shell: {e}")
        except OSError as e:  # e.g. the worker's own cwd was removed: maybe not for good
            return Outcome(worker_pb2.OUTCOME_FAILED, error=f"shell: {error_text(e)}")
        return runtime.loop.create_task(self._run(launch), name=f"shell {ctx.execution_id}")

    # ---- before the start -------------------------------------------------------------------

    def _prepare(self, ctx: Context) -> _Launch:
        try:
            job = job_pb2.Job.FromString(ctx.target)
        except Exception as e:  # protobuf's DecodeError, whose module path varies by backend
            raise _Refused(f"corrupt target: {e}") from e
        if job.WhichOneof("target") != "shell":
            raise _Refused(f"the target is not a shell job ({job.WhichOneof('target')})")
        target = job.shell
        argv = list(target.argv)
        if not argv:
            raise _Refused("argv is empty")
        if not argv[0]:
            raise _Refused("argv[0] is empty")
        for i, arg in enumerate(argv):
            if "\0" in arg:
                raise _Refused(f"argv[{i}] contains a NUL byte")
        cwd = target.cwd or None
        if cwd is not None:
            _check_cwd(cwd)
        env = self._environment(ctx, target.env)
        executable = _resolve(argv[0], cwd, env)
        if not self._allows(argv[0], executable):
            raise _Refused(f"executable {argv[0]!r} is not in the worker's --shell-allow list")
        return _Launch(argv, executable, cwd, env, ctx.raw_payload)

    def _environment(self, ctx: Context, job_env: Mapping[str, str]) -> dict[str, str]:
        if self._config.inherit_env:
            env = dict(os.environ)
        else:
            env = {k: os.environ[k] for k in BASE_ENV if k in os.environ}
        for name, value in job_env.items():
            if not name or "=" in name or "\0" in name:
                raise _Refused(f"env name {name!r} is not valid")
            if "\0" in value:
                raise _Refused(f"env {name} contains a NUL byte")
            if self._config.allowed and name.startswith("LD_"):
                raise _Refused(
                    f"env {name} is refused: the worker restricts executables (--shell-allow)"
                )
            env[name] = value
        env["SCHEDD_EXECUTION_ID"] = ctx.execution_id
        env["SCHEDD_JOB_ID"] = ctx.job_id
        env["SCHEDD_TENANT"] = ctx.tenant
        env["SCHEDD_ATTEMPT"] = str(ctx.attempt)
        env["SCHEDD_FENCING_TOKEN"] = str(ctx.fencing_token)
        env["SCHEDD_SCHEDULED_MS"] = str(ctx.scheduled_ms)
        return env

    def _allows(self, argv0: str, executable: str) -> bool:
        """Whether the resolved ``executable`` (for ``argv0``) may run (module docstring)."""
        if not self._config.allowed:
            return True
        name = os.path.basename(executable)
        for entry in self._config.allowed:
            if "/" in entry:
                if os.path.normpath(os.path.abspath(entry)) == executable:
                    return True
            elif (
                entry == name == os.path.basename(argv0)
                and os.path.dirname(executable) in self._worker_path
            ):
                return True
        return False

    # ---- the run ------------------------------------------------------------------------------

    async def _run(self, launch: _Launch) -> Outcome:
        loop = asyncio.get_running_loop()
        capture = _Capture(loop, self._config.output_limit)
        try:
            transport = await self._spawn(loop, launch, capture)
        except OSError as e:
            return _spawn_failure(launch, e)
        started = loop.time()
        duration_ms = 0
        pgid = transport.get_pid()
        stdin = transport.get_pipe_transport(0)
        try:
            if isinstance(stdin, asyncio.WriteTransport):
                if launch.stdin:
                    stdin.write(launch.stdin)  # EPIPE (stdin closed early) ends it quietly
                stdin.close()  # after what is buffered is written
            await capture.exited
            duration_ms = int((loop.time() - started) * 1000)
            await asyncio.wait([capture.drained], timeout=_PIPE_GRACE_S)
            # Leftovers of the job (background processes, pipe holders) end with it.
            if await self._stop_group(pgid, capture):
                raise asyncio.CancelledError
            # EOF follows the holders' end; one that left the group is not waited for long.
            if not capture.drained.done():
                await asyncio.wait([capture.drained], timeout=_PIPE_GRACE_S)
        except asyncio.CancelledError:
            await self._stop_group(pgid, capture)
            raise
        finally:
            if isinstance(stdin, asyncio.WriteTransport) and stdin.get_write_buffer_size():
                stdin.abort()  # the payload was never read: drop it, close the pipe
            transport.close()
        return self._outcome(transport.get_returncode(), duration_ms, capture)

    async def _spawn(
        self, loop: asyncio.AbstractEventLoop, launch: _Launch, capture: _Capture
    ) -> asyncio.SubprocessTransport:
        """Start the child; a cancellation meanwhile lets the start finish, then stops it."""
        spawn = loop.create_task(
            loop.subprocess_exec(
                lambda: capture,
                *launch.argv,
                executable=launch.executable,
                cwd=launch.cwd,
                env=launch.env,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
            )
        )
        try:
            transport, _ = await asyncio.shield(spawn)
        except asyncio.CancelledError:
            while not spawn.done():
                with contextlib.suppress(asyncio.CancelledError):
                    await asyncio.wait([spawn])
            if spawn.cancelled() or spawn.exception() is not None:
                raise
            transport, _ = spawn.result()
            try:
                await self._stop_group(transport.get_pid(), capture)
            finally:
                transport.close()
            raise
        return transport

    async def _stop_group(self, pgid: int, capture: _Capture) -> bool:
        """SIGTERM the group if alive, give it ``kill_grace_s``, SIGKILL what is left and wait
        (bounded) until it is gone and the child reaped. Cancellations meanwhile do not
        interrupt it (they skip the rest of the grace); returns whether one came."""
        loop = asyncio.get_running_loop()
        cancelled = False
        if _alive(pgid, capture):
            _signal_group(pgid, signal.SIGTERM)
            _signal_group(pgid, signal.SIGCONT)
            try:
                await _until_gone(pgid, capture, loop.time() + self._config.kill_grace_s)
            except asyncio.CancelledError:
                cancelled = True
        if _alive(pgid, capture):
            _signal_group(pgid, signal.SIGKILL)
        deadline = loop.time() + _REAP_S
        while _alive(pgid, capture) and loop.time() < deadline:
            try:
                await _until_gone(pgid, capture, deadline)
            except asyncio.CancelledError:
                cancelled = True
        return cancelled

    def _outcome(self, returncode: int | None, duration_ms: int, capture: _Capture) -> Outcome:
        code = -1 if returncode is None else returncode
        limit = self._config.output_limit
        output = _JSON.encode(
            {
                "exit_code": code,
                "duration_ms": duration_ms,
                "stdout": capture.out.decode("utf-8", "replace"),
                "stderr": capture.err.decode("utf-8", "replace"),
                "stdout_bytes": capture.out_bytes,
                "stderr_bytes": capture.err_bytes,
                "truncated": capture.out_bytes > limit or capture.err_bytes > limit,
            }
        ).encode("utf-8")
        if code == 0:
            return Outcome(worker_pb2.OUTCOME_SUCCEEDED, output=output)
        if code < 0:
            return Outcome(worker_pb2.OUTCOME_FAILED, output=output, error=_signal_text(-code))
        line = _last_line(capture.err_tail)
        error = f"exit code {code}: {line}" if line else f"exit code {code}"
        return Outcome(worker_pb2.OUTCOME_FAILED, output=output, error=error)


# ---- helpers ----------------------------------------------------------------------------------


def _check_cwd(cwd: str) -> None:
    if "\0" in cwd:
        raise _Refused("cwd contains a NUL byte")
    if not os.path.isabs(cwd):
        raise _Refused(f"cwd {cwd!r} is not an absolute path")
    if not os.path.exists(cwd):
        raise _Refused(f"cwd {cwd} does not exist")
    if not os.path.isdir(cwd):
        raise _Refused(f"cwd {cwd} is not a directory")


def _resolve(argv0: str, cwd: str | None, env: Mapping[str, str]) -> str:
    """The absolute, lexically normalized path ``argv0`` runs (module docstring)."""
    base = cwd if cwd is not None else os.getcwd()
    if "/" in argv0:
        path = os.path.normpath(os.path.join(base, argv0))
        if not os.path.exists(path):
            raise _Refused(f"executable {argv0!r} does not exist")
        if not os.path.isfile(path):
            raise _Refused(f"executable {argv0!r} is not a file")
        if not os.access(path, os.X_OK):
            raise _Refused(f"executable {argv0!r} is not executable (permission denied)")
        return path
    # The job's PATH, its relative entries (and "", the current directory) taken from cwd.
    dirs = [os.path.join(base, d) for d in os.get_exec_path(dict(env))]
    found = shutil.which(argv0, path=os.pathsep.join(dirs))
    if found is None:
        raise _Refused(f"executable {argv0!r} not found on PATH")
    return os.path.normpath(found)


def _spawn_failure(launch: _Launch, e: OSError) -> Outcome:
    code = (
        worker_pb2.OUTCOME_FAILED_PERMANENT
        if e.errno in _PERMANENT_ERRNOS
        else worker_pb2.OUTCOME_FAILED
    )
    reason = e.strerror or str(e)
    if launch.cwd is not None and e.filename == launch.cwd:
        return Outcome(code, error=f"shell: cannot enter cwd {launch.cwd}: {reason}")
    if e.errno in _PERMANENT_ERRNOS:
        return Outcome(code, error=f"shell: cannot execute {launch.argv[0]!r}: {reason}")
    return Outcome(code, error=f"shell: cannot start {launch.argv[0]!r}: {reason}")


def _signal_text(signum: int) -> str:
    try:
        return f"killed by signal {signum} ({signal.Signals(signum).name})"
    except ValueError:
        return f"killed by signal {signum}"


def _last_line(tail: bytes | bytearray) -> str:
    for raw in reversed(tail.decode("utf-8", "replace").splitlines()):
        line = raw.strip()
        if line:
            return line[:_ERROR_LINE_CHARS]
    return ""


def _signal_group(pgid: int, signum: int) -> None:
    # Gone (or only members we may not signal, which left our control anyway).
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signum)


def _alive(pgid: int, capture: _Capture) -> bool:
    """Whether the child runs, or a member of its group that is not a zombie."""
    if not capture.exited.done():
        return True
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return _has_live_member(pgid)


def _has_live_member(pgid: int) -> bool:
    """Whether ``/proc`` lists a process of group ``pgid`` that is not a zombie (orphans that
    died wait as zombies until init reaps them; some container inits never do)."""
    try:
        names = os.listdir("/proc")
    except OSError:
        return True
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue  # exited meanwhile
        # "pid (comm) state ppid pgrp ...": comm may hold spaces and parentheses.
        fields = stat[stat.rfind(b")") + 2 :].split()
        if len(fields) > 2 and int(fields[2]) == pgid and fields[0] not in (b"Z", b"X"):
            return True
    return False


async def _until_gone(pgid: int, capture: _Capture, deadline: float) -> None:
    """Return once the group is gone (:func:`_alive` false) or at ``deadline``."""
    loop = asyncio.get_running_loop()
    if not capture.exited.done():
        await asyncio.wait([capture.exited], timeout=max(0.0, deadline - loop.time()))
    while True:  # polled: nothing signals that the last member of a group is gone
        left = deadline - loop.time()
        if left <= 0 or not _alive(pgid, capture):
            return
        await asyncio.sleep(min(_POLL_S, left))

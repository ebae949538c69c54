"""Background processes with pid files: start detached, tell whether alive, stop with a deadline.

A pid file alone is not trusted: after a reboot or a crash the pid may belong to another
program, and a process whose parent does not reap it lingers as a zombie that ``kill -0`` still
finds. A process counts as ours and alive only when ``/proc/PID`` shows it running (not a
zombie) and its command line contains the marker we started it with (its data directory).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Daemon:
    """One background process of the cluster.

    Attributes:
        name: ``m0``, ``node-1``, ``worker-2``...
        pid_file: where its pid is kept.
        log_file: its stdout and stderr.
        marker: a string its command line contains (tells it from an unrelated process that
            got the same pid).
    """

    name: str
    pid_file: Path
    log_file: Path
    marker: str

    def pid(self) -> int | None:
        """The pid of the running process; None when it is not running."""
        try:
            pid = int(self.pid_file.read_text().strip())
        except (FileNotFoundError, ValueError):
            return None
        return pid if is_ours(pid, self.marker) else None

    def start(self, argv: Sequence[str], *, cwd: Path, env: dict[str, str]) -> int:
        """Starts ``argv`` in its own session (a Ctrl-C in the terminal does not reach it),
        appending to the log file; returns its pid."""
        self.log_file.parent.mkdir(parents=True, exist_ok=True)
        with self.log_file.open("ab") as log:
            log.write(f"\n=== {time.strftime('%Y-%m-%d %H:%M:%S')} start ===\n".encode())
            log.flush()
            proc = subprocess.Popen(
                list(argv),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=cwd,
                env=env,
                start_new_session=True,
            )
        self.pid_file.write_text(f"{proc.pid}\n")
        # Popen returns once the exec began, but the kernel fills in the new command line a
        # moment later (an empty /proc/PID/cmdline in between): wait for it, so a check right
        # after this does not take the new process for a dead one.
        deadline = time.monotonic() + 5.0
        while not is_ours(proc.pid, self.marker) and proc.poll() is None:
            if time.monotonic() > deadline:
                break
            time.sleep(0.01)
        return proc.pid

    def tail(self, lines: int = 15) -> str:
        try:
            text = self.log_file.read_text(errors="replace").splitlines()
        except FileNotFoundError:
            return "(no log)"
        return "\n".join(text[-lines:])


def _state(pid: int) -> str | None:
    """The one-letter state of ``pid`` from /proc (R, S, Z...); None when there is none."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    # "pid (comm) S ...": comm may hold spaces and parentheses, the state follows the last ")".
    return stat.rpartition(")")[2].split()[0]


def is_ours(pid: int, marker: str) -> bool:
    state = _state(pid)
    if state is None or state in ("Z", "X"):
        return False
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return False
    return marker in cmdline


def stop_all(daemons: Sequence[Daemon], timeout_s: float) -> list[str]:
    """SIGTERM to every running daemon, SIGKILL to those still running after ``timeout_s``.

    Returns one line per daemon that was running, saying how it ended. Pid files go in
    every case, so a later ``up`` starts afresh.
    """
    running: dict[str, tuple[Daemon, int]] = {}
    for d in daemons:
        pid = d.pid()
        if pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
            running[d.name] = (d, pid)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and any(
        is_ours(pid, d.marker) for d, pid in running.values()
    ):
        time.sleep(0.1)
    report: list[str] = []
    for name, (d, pid) in running.items():
        if is_ours(pid, d.marker):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            _wait_gone(pid, d.marker, 5.0)
            report.append(f"{name} killed (pid {pid}: still running {timeout_s:g} s after SIGTERM)")
        else:
            report.append(f"{name} stopped (pid {pid})")
    for d in daemons:
        d.pid_file.unlink(missing_ok=True)
    return report


def _wait_gone(pid: int, marker: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while is_ours(pid, marker) and time.monotonic() < deadline:
        time.sleep(0.05)

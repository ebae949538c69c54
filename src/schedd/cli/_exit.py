"""Exit codes of schedctl and the one-line error report."""

from __future__ import annotations

import sys

import click

from schedd._errors import InvalidArgument, NotFound, SchedError

OK = 0
ERROR = 1
USAGE = 2
NOT_FOUND = 3
CONFLICT = 4
UNAVAILABLE = 5

_BY_CODE = {
    "INVALID_ARGUMENT": USAGE,
    "NOT_FOUND": NOT_FOUND,
    "ALREADY_EXISTS": CONFLICT,
    "ABORTED": CONFLICT,
    "FAILED_PRECONDITION": CONFLICT,
    "UNAVAILABLE": UNAVAILABLE,
    "DEADLINE_EXCEEDED": UNAVAILABLE,
}


def exit_code(err: SchedError) -> int:
    """The exit code for an error: 2 bad input, 3 not found, 4 conflict, 5 unavailable, else 1."""
    if isinstance(err, InvalidArgument):
        return USAGE
    if isinstance(err, NotFound):
        return NOT_FOUND
    return _BY_CODE.get(err.grpc_code, ERROR)


def report(message: str) -> None:
    """Write one line to stderr: ``schedctl: error: message`` (newlines folded)."""
    line = " ".join(message.split())
    click.echo(f"schedctl: error: {line}", file=sys.stderr)

"""Exit codes of schedctl and the one-line error report."""

from __future__ import annotations

import sys
from collections.abc import Iterable

import click

from schedd._errors import InvalidArgument, NotFound, SchedError
from schedd.v1 import scheduler_pb2

OK = 0
ERROR = 1
USAGE = 2
NOT_FOUND = 3
CONFLICT = 4
UNAVAILABLE = 5
DENIED = 6

_BY_CODE = {
    "INVALID_ARGUMENT": USAGE,
    "NOT_FOUND": NOT_FOUND,
    "ALREADY_EXISTS": CONFLICT,
    "ABORTED": CONFLICT,
    "FAILED_PRECONDITION": CONFLICT,
    "UNAVAILABLE": UNAVAILABLE,
    "DEADLINE_EXCEEDED": UNAVAILABLE,
    "UNAUTHENTICATED": DENIED,
    "PERMISSION_DENIED": DENIED,
}


def exit_code(err: SchedError) -> int:
    """The exit code for an error: 2 bad input, 3 not found, 4 conflict, 5 unavailable,
    6 not authenticated or not allowed, else 1."""
    if isinstance(err, InvalidArgument):
        return USAGE
    if isinstance(err, NotFound):
        return NOT_FOUND
    return _BY_CODE.get(err.grpc_code, ERROR)


def report(message: str) -> None:
    """Write one line to stderr: ``schedctl: error: message`` (newlines folded)."""
    line = " ".join(message.split())
    click.echo(f"schedctl: error: {line}", file=sys.stderr)


def warn_missing(missing: Iterable[scheduler_pb2.MissingNode], what: str = "list") -> None:
    """One line on stderr when some node did not answer a cluster-wide call (nothing when all
    did): ``schedctl: warning: no answer from node n2 (reason); the list may be incomplete``."""
    nodes = ", ".join(f"node {m.node_id} ({m.reason or 'no reason given'})" for m in missing)
    if nodes:
        line = " ".join(f"no answer from {nodes}; the {what} may be incomplete".split())
        click.echo(f"schedctl: warning: {line}", file=sys.stderr)

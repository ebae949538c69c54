"""Exit codes of schedctl and the one-line error report."""

from __future__ import annotations

import sys
from collections.abc import Iterable

import click

from schedd._errors import InvalidArgument, NotFound, SchedError, TlsHandshakeFailed
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


#: What to do about each way a node refused schedctl's TLS settings (schedd._handshake).
_TLS_ADVICE = {
    "SPEAKS_TLS": "the node at {ep} speaks TLS: pass --cacert FILE (the CA that signed the"
    " nodes' certificates; and --cert, --key when they require client certificates)",
    "PLAINTEXT": "the node at {ep} does not speak TLS: drop --cacert, --cert, --key and"
    " --tls-server-name",
    "UNTRUSTED": "the node at {ep}: certificate not trusted ({detail}): --cacert must be the"
    " CA that signed the nodes' certificates",
    "WRONG_NAME": "the node at {ep}: its certificate does not hold the name dialled"
    " ({detail}): pass --tls-server-name NAME",
    "CERT_REQUIRED": "the node at {ep} requires a client certificate: pass --cert FILE and"
    " --key FILE",
    "CERT_REFUSED": "the node at {ep} refused the client certificate (not signed by a CA it"
    " trusts, or expired): check --cert",
}


def tls_advice(err: TlsHandshakeFailed) -> str:
    """The line schedctl prints for a TLS failure, naming its flags."""
    template = _TLS_ADVICE.get(err.mismatch)
    if template is None:
        return str(err)
    return template.format(ep=err.endpoint, detail=err.detail or "no detail")


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

"""Why a gRPC connection to a node failed, when TLS is the reason.

gRPC says little when a TLS handshake fails: a plaintext client calling a TLS node, and a TLS
client whose certificate the node refuses, both end in ``UNAVAILABLE: ... Socket closed``.
:func:`diagnose` finds out by trying the handshake itself (one TCP connection, with Python's
``ssl`` and the caller's own settings) and says which of :class:`Mismatch` it is, or None
when TLS is not the problem (nothing listens, the node is overloaded)::

    plaintext client, the node serves TLS          the handshake succeeds  -> SPEAKS_TLS
    TLS client, the node is plaintext              "wrong version number"  -> PLAINTEXT
    the node's certificate not signed by the CA    "certificate verify failed"  -> UNTRUSTED
    ... or not for the name dialled                "hostname mismatch"     -> WRONG_NAME
    the handshake succeeds, then the node hangs up before its first HTTP/2 frame:
        this client gave no certificate            -> CERT_REQUIRED
        it gave one                                -> CERT_REFUSED

(With TLS 1.3 the server verifies a client certificate after the client has finished its
side of the handshake, so a refusal is only seen as the connection closing.)
"""

from __future__ import annotations

import asyncio
import enum
import socket
import ssl
from dataclasses import dataclass

from schedd._tls import TlsFiles

#: The client preface and an empty SETTINGS frame: a node that accepted the connection
#: answers with its own SETTINGS frame.
_H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes.fromhex("000000040000000000")


class Mismatch(enum.Enum):
    """How a client and a node failed to agree on TLS; the value says it in words."""

    SPEAKS_TLS = "the node speaks TLS and this client connects in plaintext"
    PLAINTEXT = "the node does not speak TLS (plaintext gRPC) and this client wants TLS"
    UNTRUSTED = "certificate not trusted: the node's certificate is not signed by the CA given"
    WRONG_NAME = "the node's certificate does not hold the name dialled"
    CERT_REQUIRED = "the node requires a client certificate and this client gave none"
    CERT_REFUSED = (
        "the node refused this client's certificate (not signed by a CA it trusts, or expired)"
    )


@dataclass(frozen=True)
class Diagnosis:
    """A :class:`Mismatch` and what the TLS library said (``detail``, may be empty)."""

    mismatch: Mismatch
    detail: str = ""

    def __str__(self) -> str:
        return f"{self.mismatch.value} ({self.detail})" if self.detail else self.mismatch.value


async def diagnose(address: str, tls: TlsFiles | None, timeout_s: float = 2.0) -> Diagnosis | None:
    """Why a client with ``tls`` (None: plaintext) cannot talk to the node at ``address``
    (``HOST:PORT``), if TLS is why; None when it is not, or when nothing answers within
    ``timeout_s``. (A blocking socket in a thread: asyncio's SSL transport at times held the
    node's first frame back until the deadline.)"""
    host, _, port = address.rpartition(":")
    host = host.strip("[]")
    if tls is None:
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    else:
        try:
            ctx = tls.client_ssl_context()
        except (ValueError, ssl.SSLError, OSError):
            return None
    ctx.set_alpn_protocols(["h2"])
    name = (tls.server_name if tls is not None else None) or host
    try:
        return await asyncio.to_thread(_try, ctx, host, int(port), name, tls, timeout_s)
    except ValueError:
        return None


def _try(
    ctx: ssl.SSLContext, host: str, port: int, name: str, tls: TlsFiles | None, timeout_s: float
) -> Diagnosis | None:
    try:
        raw = socket.create_connection((host, port), timeout=timeout_s)
    except OSError:
        return None  # refused, unreachable: not a TLS question
    with raw:
        try:
            conn = ctx.wrap_socket(raw, server_hostname=name)
        except ssl.SSLCertVerificationError as exc:
            detail = (exc.verify_message or str(exc)).rstrip(".")
            if "hostname" in detail.lower() or "ip address mismatch" in detail.lower():
                return Diagnosis(Mismatch.WRONG_NAME, detail)
            return Diagnosis(Mismatch.UNTRUSTED, detail)
        except ssl.SSLError as exc:
            if tls is not None and exc.reason in ("WRONG_VERSION_NUMBER", "RECORD_LAYER_FAILURE"):
                return Diagnosis(Mismatch.PLAINTEXT)
            return None
        except OSError:
            return None
        with conn:
            return _after_handshake(conn, tls)


def _after_handshake(conn: ssl.SSLSocket, tls: TlsFiles | None) -> Diagnosis | None:
    """The handshake went through: a plaintext client has its answer; a TLS client learns
    whether the node then took the connection (its first HTTP/2 frame) or hung up on it."""
    if tls is None:
        return Diagnosis(Mismatch.SPEAKS_TLS)
    detail = ""
    try:
        conn.sendall(_H2_PREFACE)
        answer = conn.recv(9)
    except TimeoutError:
        return None  # a node too busy to answer: not a TLS question
    except (ssl.SSLError, OSError) as exc:
        answer = b""
        detail = str(getattr(exc, "reason", "") or "")
    if answer:
        return None  # the node took this connection: TLS is not what failed
    refused = Mismatch.CERT_REFUSED if tls.has_certificate else Mismatch.CERT_REQUIRED
    return Diagnosis(refused, detail)

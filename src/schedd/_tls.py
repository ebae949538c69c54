"""TLS settings of a node, a worker or a client: certificate files read once, checked, and
turned into what gRPC and aiohttp take.

A :class:`TlsFiles` names the files; its :attr:`~TlsFiles.material` reads and checks them the
first time it is asked for (a missing file, a key without its certificate, a file that is not
PEM, a key that does not belong to the certificate, an expired certificate: each a
:class:`TlsConfigError` naming the setting), and every credential is made from those bytes::

    tls = TlsFiles(cert_file="node.pem", key_file="node-key.pem", ca_file="ca.pem")
    server.add_secure_port(listen, tls.server_credentials())   # mTLS: the CA is given
    channel = grpc.aio.secure_channel(peer, tls.channel_credentials(), tls.channel_options())

Who uses what:

- a node serves gRPC with :meth:`~TlsFiles.server_credentials` (client certificates required
  and verified against ``ca_file`` when one is given), dials its peers with
  :meth:`~TlsFiles.channel_credentials` (its own certificate as client certificate) and serves
  the dashboard and metrics with :meth:`~TlsFiles.server_ssl_context` (no client certificate:
  browsers and Prometheus);
- a worker and a client dial with :meth:`~TlsFiles.channel_credentials` (``ca_file`` None: the
  system's CAs) and :meth:`~TlsFiles.channel_options` (the server-name override).

Certificates are read once, at start: rotating them means restarting with the new files.
"""

from __future__ import annotations

import datetime
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import grpc
from cryptography import x509
from cryptography.hazmat.primitives import serialization

#: The settings of a :class:`TlsFiles`, as errors name them unless told other names.
FIELDS = ("cert_file", "key_file", "ca_file", "server_name")


class TlsConfigError(ValueError):
    """A TLS setting that cannot be used. ``field`` is the setting (a :data:`FIELDS` name);
    :meth:`message` names it, and any other setting the reason mentions, as the caller calls
    them (``--tls-cert-file``, ``--cert``, ``tls.cert_file``)."""

    def __init__(self, field: str, reason: str, **values: object) -> None:
        self.field = field
        self._reason = reason
        self._values = values
        super().__init__(self.message())

    def message(self, names: Mapping[str, str] | None = None) -> str:
        """``"<setting>: <reason>"`` with the settings called by ``names`` (field -> name)."""
        called = {f: f for f in FIELDS} | dict(names or {})
        return f"{called[self.field]}: {self.reason(names)}"

    def reason(self, names: Mapping[str, str] | None = None) -> str:
        """Why, the settings it mentions called by ``names`` (without the setting itself)."""
        called = {f: f for f in FIELDS} | dict(names or {})
        return self._reason.format(**called, **self._values)


@dataclass(frozen=True)
class TlsMaterial:
    """The PEM bytes of a :class:`TlsFiles`, read and checked."""

    cert: bytes | None
    key: bytes | None
    ca: bytes | None


@dataclass(frozen=True, kw_only=True)
class TlsFiles:
    """Certificate files and an optional name to verify the other side's certificate against.

    Attributes:
        cert_file: This side's certificate (PEM; a chain: the leaf first). A server's serving
            certificate; a client's certificate for mutual TLS. With ``key_file``.
        key_file: The private key of ``cert_file`` (PEM, not encrypted).
        ca_file: The CA certificates (PEM bundle) the other side's certificate is verified
            against. A server given one requires client certificates signed by it; a client
            without one trusts the system's CAs.
        server_name: The name the server's certificate must hold, instead of the host dialled
            (gRPC's ``grpc.ssl_target_name_override``): for nodes dialled by an IP address
            their certificates do not hold.

    Raises:
        TlsConfigError: ``cert_file`` without ``key_file`` or the reverse (at construction;
            the files themselves are read by :attr:`material`).
    """

    cert_file: str | Path | None = None
    key_file: str | Path | None = None
    ca_file: str | Path | None = None
    server_name: str | None = None

    def __post_init__(self) -> None:
        if self.cert_file and not self.key_file:
            raise TlsConfigError("cert_file", "needs {key_file}: a certificate goes with its key")
        if self.key_file and not self.cert_file:
            raise TlsConfigError("key_file", "needs {cert_file}: a key goes with its certificate")

    @cached_property
    def material(self) -> TlsMaterial:
        """The files' contents, read (once) and checked.

        Raises:
            TlsConfigError: A file that cannot be read, is not PEM of its kind, a key that is
                encrypted or does not belong to the certificate, an expired certificate.
        """
        cert = _read(self.cert_file, "cert_file")
        key = _read(self.key_file, "key_file")
        ca = _read(self.ca_file, "ca_file")
        if ca is not None:
            _certificates(ca, "ca_file", self.ca_file)
        if cert is not None and key is not None:
            leaf = _certificates(cert, "cert_file", self.cert_file)[0]
            _check_key(leaf, key, self.key_file)
            _check_dates(leaf, self.cert_file)
        return TlsMaterial(cert, key, ca)

    @property
    def has_certificate(self) -> bool:
        """Whether this side has a certificate of its own (it can serve, or do mutual TLS)."""
        return bool(self.cert_file)

    def check_server(self) -> None:
        """Raises unless these settings can serve TLS (a certificate and its key), and reads
        the files.

        Raises:
            TlsConfigError: No certificate; or as :attr:`material`.
        """
        if not self.has_certificate:
            name = "ca_file" if self.ca_file else "server_name" if self.server_name else "cert_file"
            raise TlsConfigError(
                name, "needs {cert_file} and {key_file}: serving TLS takes a certificate"
            )
        _ = self.material

    def server_credentials(self) -> grpc.ServerCredentials:
        """gRPC server credentials: this certificate; with ``ca_file``, client certificates
        are required and verified against it."""
        self.check_server()
        m = self.material
        assert m.cert is not None and m.key is not None
        return grpc.ssl_server_credentials(
            [(m.key, m.cert)], root_certificates=m.ca, require_client_auth=m.ca is not None
        )

    def channel_credentials(self) -> grpc.ChannelCredentials:
        """gRPC channel credentials: the CA to verify servers against (None: the system's)
        and this certificate, presented when the server asks for one."""
        m = self.material
        return grpc.ssl_channel_credentials(
            root_certificates=m.ca, private_key=m.key, certificate_chain=m.cert
        )

    def channel_options(self) -> list[tuple[str, str]]:
        """Channel options: the server-name override when ``server_name`` is set."""
        return [("grpc.ssl_target_name_override", self.server_name)] if self.server_name else []

    def server_ssl_context(self) -> ssl.SSLContext:
        """An SSL context for an HTTPS server (the dashboard, metrics): this certificate, no
        client certificate asked for."""
        self.check_server()
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        assert self.cert_file is not None and self.key_file is not None
        ctx.load_cert_chain(str(self.cert_file), str(self.key_file))
        return ctx

    def client_ssl_context(self) -> ssl.SSLContext:
        """An SSL context for a client: verifies servers against ``ca_file`` (None: the
        system's CAs) and presents this certificate, if any."""
        m = self.material
        ctx = ssl.create_default_context(
            ssl.Purpose.SERVER_AUTH, cadata=m.ca.decode() if m.ca is not None else None
        )
        if self.cert_file and self.key_file:
            ctx.load_cert_chain(str(self.cert_file), str(self.key_file))
        return ctx


def _read(path: str | Path | None, field: str) -> bytes | None:
    if not path:
        return None
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise TlsConfigError(field, "cannot read {path}: {why}", path=path, why=reason) from exc


def _certificates(data: bytes, field: str, path: object) -> list[x509.Certificate]:
    try:
        certs = x509.load_pem_x509_certificates(data)
    except ValueError as exc:
        raise TlsConfigError(field, "{path} holds no PEM certificate", path=path) from exc
    return certs


def _check_key(leaf: x509.Certificate, key_pem: bytes, path: object) -> None:
    try:
        key = serialization.load_pem_private_key(key_pem, password=None)
    except TypeError as exc:  # encrypted: a node cannot ask anyone for the password
        raise TlsConfigError(
            "key_file", "{path} is encrypted: give an unencrypted key", path=path
        ) from exc
    except ValueError as exc:
        raise TlsConfigError("key_file", "{path} holds no PEM private key", path=path) from exc
    spki = serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    if key.public_key().public_bytes(*spki) != leaf.public_key().public_bytes(*spki):
        raise TlsConfigError("key_file", "{path} is not the key of {cert_file}", path=path)


def _check_dates(leaf: x509.Certificate, path: object) -> None:
    now = datetime.datetime.now(datetime.UTC)
    if leaf.not_valid_after_utc < now:
        raise TlsConfigError(
            "cert_file", "{path} expired at {at}", path=path, at=leaf.not_valid_after_utc
        )

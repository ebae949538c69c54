"""A development CA: the certificates a local cluster needs for TLS everywhere (``scripts/dev-ca``).

``make_dev_ca(DIR)`` writes two CAs and their leaf certificates (ECDSA P-256, keys mode 0600)::

    ca.pem, ca-key.pem                    the schedd CA: nodes, workers and clients trust it
    node.pem, node-key.pem                a node: serves gRPC, the dashboard and metrics, and is
                                          the client certificate of its calls to peers
                                          (serverAuth + clientAuth)
    worker.pem, worker-key.pem            a worker's client certificate, which also serves its
                                          metrics endpoint (clientAuth + serverAuth)
    client.pem, client-key.pem            schedctl's and the SDK's client certificate (clientAuth)
    etcd-ca.pem, etcd-ca-key.pem          a CA of etcd's own, so that no schedd certificate
                                          (a worker's, a client's) is accepted by etcd
    etcd-member.pem, etcd-member-key.pem  every etcd member: clients and peers (both usages)
    etcd-client.pem, etcd-client-key.pem  the nodes' client certificate to etcd (clientAuth)

Server certificates (a node's, a worker's, etcd's) hold ``localhost``, ``127.0.0.1``, ``::1``
and each ``--host`` (a name or an IP address) as subject alternative names. One certificate
serves every node: good enough for a cluster on one machine, and not what production wants
(docs/operations.md, "TLS").

Nothing is overwritten unless ``force``: a directory that already holds all of it is left as
it is (asking for a host its node certificate lacks is an error then), one that holds part
of it is refused.
"""

from __future__ import annotations

import argparse
import datetime
import ipaddress
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

#: Always in a server certificate's names: what loopback clusters dial.
DEFAULT_HOSTS = ("localhost", "127.0.0.1", "::1")
CA_DAYS = 3650
LEAF_DAYS = 825
_SERVER = ExtendedKeyUsageOID.SERVER_AUTH
_CLIENT = ExtendedKeyUsageOID.CLIENT_AUTH


class DevCaError(Exception):
    """The directory cannot take a dev CA (the message says why and what to do)."""


@dataclass(frozen=True)
class Leaf:
    """One certificate to make: its file stem, common name, issuing CA and usages."""

    stem: str
    common_name: str
    ca: str
    usages: tuple[x509.ObjectIdentifier, ...]

    @property
    def server(self) -> bool:
        return _SERVER in self.usages


CAS = {"ca": "schedd dev CA", "etcd-ca": "schedd dev etcd CA"}
LEAVES = (
    Leaf("node", "schedd-node", "ca", (_SERVER, _CLIENT)),
    Leaf("worker", "schedd-worker", "ca", (_CLIENT, _SERVER)),
    Leaf("client", "schedctl", "ca", (_CLIENT,)),
    Leaf("etcd-member", "etcd-member", "etcd-ca", (_SERVER, _CLIENT)),
    Leaf("etcd-client", "schedd-node", "etcd-ca", (_CLIENT,)),
)


def cert_path(directory: Path, stem: str) -> Path:
    return directory / f"{stem}.pem"


def key_path(directory: Path, stem: str) -> Path:
    return directory / f"{stem}-key.pem"


def all_files(directory: Path) -> list[Path]:
    """Every file :func:`make_dev_ca` writes, CAs first."""
    stems = [*CAS, *(leaf.stem for leaf in LEAVES)]
    return [p for s in stems for p in (cert_path(directory, s), key_path(directory, s))]


def make_dev_ca(
    directory: Path, hosts: Sequence[str] = (), *, force: bool = False, days: int = LEAF_DAYS
) -> list[Path]:
    """Writes the CAs and certificates into ``directory`` (made if missing, mode 0700).

    Args:
        directory: Where the files go.
        hosts: Names and IP addresses the server certificates hold besides the defaults.
        force: Make everything anew, overwriting what is there.
        days: How long the leaf certificates are valid.

    Returns:
        The files written (empty: the directory already held a dev CA for these hosts).

    Raises:
        DevCaError: Part of it exists (without ``force``), or the existing node certificate
            lacks one of ``hosts``.
    """
    wanted = [*DEFAULT_HOSTS, *(h for h in hosts if h not in DEFAULT_HOSTS)]
    files = all_files(directory)
    existing = [p for p in files if p.exists()]
    if existing and not force:
        if len(existing) < len(files):
            names = ", ".join(p.name for p in existing)
            raise DevCaError(
                f"{directory} already holds {names}: not overwriting part of a CA "
                "(--force makes everything anew)"
            )
        missing = sorted(set(wanted) - set(server_names(cert_path(directory, "node"))))
        if missing:
            raise DevCaError(
                f"{cert_path(directory, 'node')} does not hold {', '.join(missing)}: "
                "--force makes new certificates (every process then needs restarting)"
            )
        return []
    directory.mkdir(parents=True, exist_ok=True)
    directory.chmod(0o700)
    now = datetime.datetime.now(datetime.UTC)
    written: list[Path] = []
    issuers: dict[str, tuple[x509.Certificate, ec.EllipticCurvePrivateKey]] = {}
    for stem, name in CAS.items():
        key = ec.generate_private_key(ec.SECP256R1())
        cert = _ca_cert(name, key, now)
        issuers[stem] = (cert, key)
        written += _write(directory, stem, cert, key)
    for leaf in LEAVES:
        key = ec.generate_private_key(ec.SECP256R1())
        ca_cert, ca_key = issuers[leaf.ca]
        cert = _leaf_cert(leaf, key, ca_cert, ca_key, wanted if leaf.server else (), now, days)
        written += _write(directory, leaf.stem, cert, key)
    return written


def server_names(path: Path) -> list[str]:
    """The DNS names and IP addresses a certificate's subject alternative names hold."""
    cert = x509.load_pem_x509_certificate(path.read_bytes())
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return []
    ips = [str(ip) for ip in san.get_values_for_type(x509.IPAddress)]
    return [*san.get_values_for_type(x509.DNSName), *ips]


def _name(common_name: str) -> x509.Name:
    return x509.Name([
        x509.NameAttribute(NameOID.ORGANIZATION_NAME, "schedd development"),
        x509.NameAttribute(NameOID.COMMON_NAME, common_name),
    ])  # fmt: skip


def _ca_cert(
    name: str, key: ec.EllipticCurvePrivateKey, now: datetime.datetime
) -> x509.Certificate:
    usage = x509.KeyUsage(
        digital_signature=True, key_cert_sign=True, crl_sign=True, content_commitment=False,
        key_encipherment=False, data_encipherment=False, key_agreement=False,
        encipher_only=False, decipher_only=False,
    )  # fmt: skip
    public = key.public_key()
    return (
        x509.CertificateBuilder()
        .subject_name(_name(name))
        .issuer_name(_name(name))
        .public_key(public)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=CA_DAYS))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(usage, critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(public), critical=False)
        .sign(key, hashes.SHA256())
    )


def _leaf_cert(
    leaf: Leaf,
    key: ec.EllipticCurvePrivateKey,
    ca_cert: x509.Certificate,
    ca_key: ec.EllipticCurvePrivateKey,
    hosts: Sequence[str],
    now: datetime.datetime,
    days: int,
) -> x509.Certificate:
    usage = x509.KeyUsage(
        digital_signature=True, key_cert_sign=False, crl_sign=False, content_commitment=False,
        key_encipherment=False, data_encipherment=False, key_agreement=False,
        encipher_only=False, decipher_only=False,
    )  # fmt: skip
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(leaf.common_name))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(usage, critical=True)
        .add_extension(x509.ExtendedKeyUsage(list(leaf.usages)), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
            critical=False,
        )
    )
    if hosts:
        builder = builder.add_extension(
            x509.SubjectAlternativeName([_general_name(h) for h in hosts]), critical=False
        )
    return builder.sign(ca_key, hashes.SHA256())


def _general_name(host: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        return x509.DNSName(host)


def _write(
    directory: Path, stem: str, cert: x509.Certificate, key: ec.EllipticCurvePrivateKey
) -> list[Path]:
    key_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    kpath, cpath = key_path(directory, stem), cert_path(directory, stem)
    # Created 0600, and made so again when overwritten (a file's mode outlives O_TRUNC).
    fd = os.open(kpath, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        os.fchmod(f.fileno(), 0o600)
        f.write(key_pem)
    cpath.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return [cpath, kpath]


USAGE_HINT = """\
Node (gRPC with mTLS, dashboard and metrics over HTTPS; etcd with client certificates):
  schedd node --tls-cert-file {d}/node.pem --tls-key-file {d}/node-key.pem \\
              --tls-ca-file {d}/ca.pem \\
              --etcd-ca {d}/etcd-ca.pem --etcd-cert {d}/etcd-client.pem \\
              --etcd-key {d}/etcd-client-key.pem ...
Worker:
  schedd worker --tls-ca-file {d}/ca.pem --tls-cert-file {d}/worker.pem \\
                --tls-key-file {d}/worker-key.pem ...
schedctl:
  schedctl --cacert {d}/ca.pem --cert {d}/client.pem --key {d}/client-key.pem ...
etcd (each member):
  etcd --cert-file {d}/etcd-member.pem --key-file {d}/etcd-member-key.pem \\
       --client-cert-auth --trusted-ca-file {d}/etcd-ca.pem \\
       --peer-cert-file {d}/etcd-member.pem --peer-key-file {d}/etcd-member-key.pem \\
       --peer-client-cert-auth --peer-trusted-ca-file {d}/etcd-ca.pem ...
"""


def main(argv: Sequence[str] | None = None) -> int:
    """``scripts/dev-ca DIR [--host NAME]... [--force]``; returns the exit status."""
    parser = argparse.ArgumentParser(
        prog="dev-ca",
        description="Make a development CA and certificates for a local schedd cluster with "
        "TLS everywhere (nodes, workers, schedctl, etcd). Not for production.",
    )
    parser.add_argument("dir", type=Path, help="where the files go (made if missing)")
    parser.add_argument(
        "--host",
        action="append",
        default=[],
        metavar="NAME",
        help="a DNS name or IP address the server certificates hold besides localhost, "
        "127.0.0.1 and ::1 (repeatable)",
    )
    parser.add_argument("--force", action="store_true", help="overwrite what is there")
    args = parser.parse_args(argv)
    try:
        written = make_dev_ca(args.dir, args.host, force=args.force)
    except (DevCaError, OSError, ValueError) as exc:
        print(f"dev-ca: error: {exc}", file=sys.stderr)
        return 1
    if not written:
        print(f"{args.dir} already holds a dev CA (--force makes everything anew)")
    else:
        print(f"made in {args.dir} (keys mode 0600):")
        for path in written:
            print(f"  {path.name}")
        names = ", ".join([*DEFAULT_HOSTS, *args.host])
        print(f"server certificates hold: {names}")
    print()
    print(USAGE_HINT.format(d=args.dir))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""scripts/dev-ca: two CAs and the certificates a local cluster needs, keys 0600, nothing
overwritten unless asked."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID

from schedd.dev._ca import DevCaError, all_files, make_dev_ca, server_names

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "dev-ca"
SERVER, CLIENT = ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH


def _cert(path: Path) -> x509.Certificate:
    return x509.load_pem_x509_certificate(path.read_bytes())


def _usages(cert: x509.Certificate) -> set[x509.ObjectIdentifier]:
    return set(cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value)


def test_the_certificates_chain_to_their_ca(tmp_path: Path) -> None:
    d = tmp_path / "ca"
    written = make_dev_ca(d, ["sched.example", "10.1.2.3"])
    assert sorted(written) == sorted(all_files(d))
    ca, etcd_ca = _cert(d / "ca.pem"), _cert(d / "etcd-ca.pem")
    for name, issuer, usages in (
        ("node", ca, {SERVER, CLIENT}),
        ("worker", ca, {SERVER, CLIENT}),
        ("client", ca, {CLIENT}),
        ("etcd-member", etcd_ca, {SERVER, CLIENT}),
        ("etcd-client", etcd_ca, {CLIENT}),
    ):
        cert = _cert(d / f"{name}.pem")
        cert.verify_directly_issued_by(issuer)
        assert _usages(cert) == usages, name
    # etcd trusts its own CA only: no worker or client certificate opens it.
    assert ca.subject != etcd_ca.subject
    names = server_names(d / "node.pem")
    assert {"localhost", "127.0.0.1", "::1", "sched.example", "10.1.2.3"} <= set(names)
    assert server_names(d / "client.pem") == []
    for path in d.glob("*-key.pem"):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    assert stat.S_IMODE(d.stat().st_mode) == 0o700


def test_nothing_is_overwritten_unless_forced(tmp_path: Path) -> None:
    d = tmp_path / "ca"
    make_dev_ca(d)
    before = (d / "ca.pem").read_bytes()
    assert make_dev_ca(d) == []  # all there: kept
    with pytest.raises(DevCaError, match=r"does not hold other\.example: --force"):
        make_dev_ca(d, ["other.example"])
    (d / "client.pem").unlink()
    with pytest.raises(DevCaError, match="not overwriting part of a CA"):
        make_dev_ca(d)
    (d / "node-key.pem").chmod(0o644)
    assert len(make_dev_ca(d, ["other.example"], force=True)) == len(all_files(d))
    assert (d / "ca.pem").read_bytes() != before
    assert stat.S_IMODE((d / "node-key.pem").stat().st_mode) == 0o600
    assert "other.example" in server_names(d / "node.pem")


def test_the_script_prints_what_it_made_and_the_flags(tmp_path: Path) -> None:
    env = {**os.environ, "SCHEDD_PYTHON": sys.executable}
    run = [str(SCRIPT), str(tmp_path / "ca"), "--host", "node.test"]
    first = subprocess.run(run, env=env, capture_output=True, text=True, timeout=60, check=False)
    assert first.returncode == 0, first.stderr
    assert "node-key.pem" in first.stdout and "--tls-cert-file" in first.stdout
    assert "--cacert" in first.stdout and "--client-cert-auth" in first.stdout
    again = subprocess.run(run, env=env, capture_output=True, text=True, timeout=60, check=False)
    assert again.returncode == 0 and "already holds a dev CA" in again.stdout
    (tmp_path / "ca" / "worker.pem").unlink()
    partial = subprocess.run(run, env=env, capture_output=True, text=True, timeout=60, check=False)
    assert partial.returncode == 1
    assert partial.stderr.startswith("dev-ca: error: ") and partial.stderr.count("\n") == 1

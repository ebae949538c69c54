"""TLS settings: every file that cannot be used is one error naming the setting, as each
caller calls it (``--tls-cert-file`` for ``schedd node``, ``--cert`` for schedctl,
``tls.cert_file`` for the SDK), before anything connects or listens."""

from __future__ import annotations

import datetime
import ssl
from pathlib import Path

import grpc
import pytest
from click.testing import CliRunner
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from schedd import InvalidArgument, TlsHandshakeFailed
from schedd._tls import TlsConfigError, TlsFiles
from schedd.cli._exit import tls_advice
from schedd.cli._serve_flags import TLS_FLAGS
from schedd.cli.schedctl import cli as schedctl
from schedd.cli.schedd_main import main as schedd
from schedd.client import Client, ClientTls
from schedd.dev._ca import make_dev_ca
from schedd.worker import Worker


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("pki")
    make_dev_ca(d)
    return d


def _error(**files: object) -> TlsConfigError:
    with pytest.raises(TlsConfigError) as info:
        tls = TlsFiles(**files)  # type: ignore[arg-type]
        _ = tls.material
    return info.value


def test_a_certificate_and_its_key_go_together(pki: Path) -> None:
    err = _error(cert_file=pki / "node.pem")
    assert err.field == "cert_file"
    assert str(err) == "cert_file: needs key_file: a certificate goes with its key"
    assert err.message(TLS_FLAGS) == (
        "--tls-cert-file: needs --tls-key-file: a certificate goes with its key"
    )
    assert _error(key_file=pki / "node-key.pem").field == "key_file"


def test_each_unusable_file_is_named(pki: Path, tmp_path: Path) -> None:
    missing = tmp_path / "nope.pem"
    err = _error(ca_file=missing)
    assert (err.field, str(err)) == ("ca_file", f"ca_file: cannot read {missing}: "
                                                "No such file or directory")  # fmt: skip
    text = tmp_path / "text.pem"
    text.write_text("not a certificate\n")
    assert str(_error(ca_file=text)) == f"ca_file: {text} holds no PEM certificate"
    err = _error(cert_file=text, key_file=pki / "node-key.pem")
    assert (err.field, err.reason()) == ("cert_file", f"{text} holds no PEM certificate")
    err = _error(cert_file=pki / "node.pem", key_file=text)
    assert str(err) == f"key_file: {text} holds no PEM private key"
    # Another certificate's key: refused here, not as a handshake gRPC cannot explain.
    err = _error(cert_file=pki / "node.pem", key_file=pki / "worker-key.pem")
    assert str(err) == f"key_file: {pki / 'worker-key.pem'} is not the key of cert_file"


def test_an_encrypted_key_and_an_expired_certificate_are_refused(tmp_path: Path) -> None:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "old")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder().subject_name(name).issuer_name(name)
        .public_key(key.public_key()).serial_number(1)
        .not_valid_before(now - datetime.timedelta(days=10))
        .not_valid_after(now - datetime.timedelta(days=1))
        .sign(key, hashes.SHA256())
    )  # fmt: skip
    (tmp_path / "old.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    encryption = serialization.BestAvailableEncryption(b"secret")
    pkcs8 = serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8
    (tmp_path / "locked.pem").write_bytes(key.private_bytes(*pkcs8, encryption))
    (tmp_path / "key.pem").write_bytes(key.private_bytes(*pkcs8, serialization.NoEncryption()))
    err = _error(cert_file=tmp_path / "old.pem", key_file=tmp_path / "locked.pem")
    assert "is encrypted: give an unencrypted key" in str(err)
    err = _error(cert_file=tmp_path / "old.pem", key_file=tmp_path / "key.pem")
    assert err.field == "cert_file" and "old.pem expired at" in str(err)


def test_good_files_make_every_credential(pki: Path) -> None:
    tls = TlsFiles(
        cert_file=pki / "node.pem",
        key_file=pki / "node-key.pem",
        ca_file=pki / "ca.pem",
        server_name="node.test",
    )
    assert tls.material is tls.material  # read once
    assert isinstance(tls.server_credentials(), grpc.ServerCredentials)
    assert isinstance(tls.channel_credentials(), grpc.ChannelCredentials)
    assert tls.channel_options() == [("grpc.ssl_target_name_override", "node.test")]
    assert isinstance(tls.server_ssl_context(), ssl.SSLContext)
    assert tls.client_ssl_context().verify_mode == ssl.CERT_REQUIRED
    # A client may trust the system's CAs and name no certificate at all.
    assert TlsFiles(server_name="x").channel_options() == [("grpc.ssl_target_name_override", "x")]
    with pytest.raises(TlsConfigError, match="needs cert_file and key_file"):
        TlsFiles(ca_file=pki / "ca.pem").check_server()


def test_the_sdk_names_the_tls_field(pki: Path, tmp_path: Path) -> None:
    with pytest.raises(InvalidArgument) as info:
        Client("127.0.0.1:1", tls=ClientTls(cert_file=tmp_path / "c.pem", key_file="k.pem"))
    assert info.value.field == "tls.cert_file"
    assert str(info.value) == f"tls.cert_file: cannot read {tmp_path / 'c.pem'}: " + (
        "No such file or directory"
    )
    with pytest.raises(InvalidArgument) as info:
        Client("127.0.0.1:1", tls=str(tmp_path / "ca.pem"))
    assert info.value.field == "tls"
    with pytest.raises(InvalidArgument, match=r"is not the key of tls\.cert_file"):
        Client("127.0.0.1:1", tls=ClientTls(cert_file=pki / "client.pem",
                                            key_file=pki / "worker-key.pem"))  # fmt: skip
    with pytest.raises(ValueError, match="cert_file: needs key_file"):
        ClientTls(cert_file="client.pem")
    # A worker reads its files when it is made, before any stream.
    with pytest.raises(ValueError, match=r"^tls\.ca_file: cannot read "):
        Worker(["127.0.0.1:1"], tls=ClientTls(ca_file=tmp_path / "none.pem"))


@pytest.mark.parametrize(
    ("command", "args", "flag", "message"),
    [
        ("node", ["--tls-ca-file", "{pki}/ca.pem"], "--tls-ca-file",
         "needs --tls-cert-file and --tls-key-file: serving TLS takes a certificate"),
        ("node", ["--tls-cert-file", "{pki}/node.pem"], "--tls-cert-file",
         "needs --tls-key-file"),
        ("node", ["--tls-cert-file", "{pki}/nope.pem", "--tls-key-file", "{pki}/node-key.pem"],
         "--tls-cert-file", "cannot read {pki}/nope.pem"),
        ("worker", ["--tls-key-file", "{pki}/worker-key.pem"], "--tls-key-file",
         "needs --tls-cert-file"),
        ("worker", ["--tls-ca-file", "{pki}/worker-key.pem"], "--tls-ca-file",
         "{pki}/worker-key.pem holds no PEM certificate"),
    ],
)  # fmt: skip
def test_schedd_names_the_flag(
    pki: Path, command: str, args: list[str], flag: str, message: str
) -> None:
    argv = [command, *(a.format(pki=pki) for a in args)]
    result = CliRunner().invoke(schedd, argv)
    assert result.exit_code == 2, result.output
    assert f"Invalid value for {flag}: {message.format(pki=pki)}" in result.output
    assert "Traceback" not in result.output


def test_schedd_reads_the_tls_flags_from_the_environment(pki: Path) -> None:
    env = {"SCHEDD_TLS_CERT_FILE": str(pki / "node.pem"), "SCHEDD_TLS_CA_FILE": str(pki / "ca.pem")}
    result = CliRunner().invoke(schedd, ["node"], env=env)
    assert result.exit_code == 2
    assert "Invalid value for --tls-cert-file: needs --tls-key-file" in result.output
    help_text = CliRunner().invoke(schedd, ["worker", "--help"]).output
    assert "--tls-server-name" in help_text and "--tls-ca-file" in help_text


def test_schedctl_names_the_flag_before_connecting(pki: Path) -> None:
    # Nothing listens on the endpoint: exit 2 (not 5) says no call was made.
    for args, message in (
        (["--cert", f"{pki}/client.pem"], "Invalid value for --cert: needs --key"),
        (["--cacert", f"{pki}/none.pem"], f"Invalid value for --cacert: cannot read {pki}/"),
    ):
        result = CliRunner().invoke(schedctl, ["--endpoints", "127.0.0.1:1", *args, "job", "list"])
        assert result.exit_code == 2, result.output
        assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1
    env = {"SCHEDCTL_KEY": f"{pki}/client-key.pem"}
    result = CliRunner().invoke(schedctl, ["--endpoints", "127.0.0.1:1", "job", "list"], env=env)
    assert result.exit_code == 2 and "Invalid value for --key: needs --cert" in result.stderr


def test_schedctl_names_the_flag_for_every_mismatch() -> None:
    def line(mismatch: str, detail: str = "") -> str:
        return tls_advice(TlsHandshakeFailed("...", "10.0.0.1:7070", mismatch, detail))

    assert line("PLAINTEXT") == (
        "the node at 10.0.0.1:7070 does not speak TLS: drop --cacert, --cert, --key and"
        " --tls-server-name"
    )
    assert line("WRONG_NAME", "Hostname mismatch, certificate is not valid for 'x'") == (
        "the node at 10.0.0.1:7070: its certificate does not hold the name dialled (Hostname"
        " mismatch, certificate is not valid for 'x'): pass --tls-server-name NAME"
    )
    for mismatch in ("SPEAKS_TLS", "UNTRUSTED", "CERT_REQUIRED", "CERT_REFUSED"):
        assert line(mismatch).startswith("the node at 10.0.0.1:7070"), mismatch

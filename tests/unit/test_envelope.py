"""The envelope and the keyring (store/_envelope.py): what opens, what does not, and why it
says so; keyring files as operators write them."""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from schedd._errors import EncryptionKeyError, InvalidArgument, Undecryptable
from schedd.cli.schedd_main import main
from schedd.model._fields import SEALED_PREFIX, check_payload
from schedd.store import EncryptionKey, Keyring, Sealer
from schedd.store._envelope import MAGIC, is_sealed, key_id_of

K1 = EncryptionKey("k1", bytes(range(32)))
K1_OTHER = EncryptionKey("k1", bytes(range(1, 33)))
K2 = EncryptionKey("k2", bytes(range(2, 34)))
CTX = b"j1\x00job.payload"


def test_round_trip_names_the_active_key_and_hides_the_plaintext() -> None:
    ring = Keyring([K1, K2])
    sealed = ring.seal(b'{"token": "hunter2"}', CTX)
    assert is_sealed(sealed) and key_id_of(sealed) == "k2"
    assert b"hunter2" not in sealed
    assert ring.open(sealed, CTX, "payload") == b'{"token": "hunter2"}'
    assert ring.seal(b"same", CTX) != ring.seal(b"same", CTX)  # a fresh nonce each time


def test_another_job_or_field_does_not_open_it() -> None:
    ring = Keyring([K1])
    sealed = ring.seal(b"secret", CTX)
    for context in (b"j2\x00job.payload", b"j1\x00job.http.headers[Authorization]"):
        with pytest.raises(Undecryptable, match="moved from another job or field"):
            ring.open(sealed, context, "payload")


def test_another_key_under_the_same_id_does_not_open_it() -> None:
    sealed = Keyring([K1]).seal(b"secret", CTX)
    with pytest.raises(Undecryptable) as err:
        Keyring([K1_OTHER]).open(sealed, CTX, "job 'j1' job.payload")
    assert err.value.key_id == "k1"
    assert str(err.value).startswith("job 'j1' job.payload: does not decrypt with key 'k1'")


@pytest.mark.parametrize("where", ["key id", "nonce", "ciphertext", "tag"])
def test_a_changed_byte_anywhere_does_not_open(where: str) -> None:
    ring = Keyring([K1, EncryptionKey("k0", bytes(32))])
    sealed = bytearray(Keyring([K1]).seal(b"secret payload", CTX))
    at = {"key id": 7, "nonce": 6 + 2 + 3, "ciphertext": 6 + 2 + 12 + 2, "tag": len(sealed) - 1}
    sealed[at[where]] ^= 0x01  # key id "k1" becomes "k0": a key the ring has, the wrong one
    with pytest.raises(Undecryptable):
        ring.open(bytes(sealed), CTX, "payload")


def test_an_unknown_key_id_is_named() -> None:
    sealed = Keyring([K2]).seal(b"secret", CTX)
    with pytest.raises(Undecryptable, match="key 'k2', which is not in this keyring"):
        Keyring([K1]).open(sealed, CTX, "payload")
    with pytest.raises(Undecryptable, match="'k2', and this process has no keyring"):
        Sealer().open(sealed, "j1", "job.payload")


def test_plaintext_passes_through_and_a_truncated_envelope_is_refused() -> None:
    ring = Keyring([K1])
    for plain in (b"", b"{}", b"\x00not the magic", MAGIC[:3]):
        assert ring.open(plain, CTX, "payload") == plain
    with pytest.raises(Undecryptable, match="not a valid envelope"):
        ring.open(MAGIC + b"\x09", CTX, "payload")
    with pytest.raises(Undecryptable, match="truncated"):
        ring.open(ring.seal(b"x", CTX)[:-17], CTX, "payload")


def test_sealed_text_round_trips_and_is_refused_elsewhere() -> None:
    sealer = Sealer(Keyring([K1]))
    value = sealer.seal_text("Bearer s3cr3t", "j1", "job.http.headers[Authorization]")
    assert value.startswith("\x00SDE:") and "s3cr3t" not in value
    assert sealer.open_text(value, "j1", "job.http.headers[Authorization]") == "Bearer s3cr3t"
    with pytest.raises(Undecryptable):
        sealer.open_text(value, "j1", "job.shell.env[TOKEN]")
    assert sealer.seal_text(value, "j1", "x") == value  # sealed once only


@settings(max_examples=200, deadline=None)
@given(plaintext=st.binary(max_size=4096), job_id=st.text(min_size=1, max_size=40))
def test_any_payload_round_trips_under_its_job_only(plaintext: bytes, job_id: str) -> None:
    assume(not plaintext.startswith(MAGIC))  # the model refuses those, see the next test
    sealer = Sealer(Keyring([K1, K2]))
    sealed = sealer.seal(plaintext, job_id, "job.payload")
    assert sealer.open(sealed, job_id, "job.payload") == plaintext
    if plaintext:
        assert is_sealed(sealed) and key_id_of(sealed) == "k2"
        assert len(sealed) == len(plaintext) + 4 + 2 + 2 + 12 + 16
        with pytest.raises(Undecryptable):
            sealer.open(sealed, job_id + "x", "job.payload")


def test_no_payload_may_look_encrypted() -> None:
    assert SEALED_PREFIX == MAGIC
    with pytest.raises(InvalidArgument, match=r"must not start with the bytes \\x00SDE"):
        check_payload("job.payload", MAGIC + b"anything")
    assert check_payload("job.payload", b"\x00SD") == b"\x00SD"


# -- keyring files ------------------------------------------------------------------------------


def _write(path: Path, text: str, mode: int = 0o600) -> Path:
    path.write_text(text)
    os.chmod(path, mode)
    return path


def test_keyring_file_the_last_key_encrypts(tmp_path: Path) -> None:
    path = _write(tmp_path / "keys", f"# comment\n\n{K1.line()}\n  {K2.line()}  \n")
    ring = Keyring.from_file(path)
    assert ring.ids() == ["k1", "k2"] and ring.active == K2
    assert repr(ring.active) == "EncryptionKey('k2')"  # the key itself never shows


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "no keys"),
        ("# only a comment\n", "no keys"),
        ("k1\n", "line 1: expected '<key id> <base64 of 32 bytes>'"),
        ("k1 not*base64\n", "line 1: the key is not base64"),
        ("k1 AAAA\n", "line 1: key 'k1': 3 bytes, not 32"),
        (f"bad/id {K1.line().split()[1]}\n", "line 1: key id 'bad/id'"),
        (f"{K1.line()}\n{K1_OTHER.line()}\n", "line 2: key 'k1' twice"),
    ],
)
def test_keyring_file_errors_name_the_line_never_the_key(
    tmp_path: Path, text: str, message: str
) -> None:
    path = _write(tmp_path / "keys", text)
    with pytest.raises(EncryptionKeyError, match=message) as err:
        Keyring.from_file(path)
    assert K1_OTHER.line().split()[1] not in str(err.value)
    assert str(path) in str(err.value)


def test_keyring_file_missing_or_open_to_others(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with pytest.raises(EncryptionKeyError, match="No such file"):
        Keyring.from_file(tmp_path / "absent")
    path = _write(tmp_path / "keys", K1.line() + "\n", mode=0o644)
    with caplog.at_level(logging.WARNING):
        Keyring.from_file(path)
    assert "can be read by group or others (mode 0644): chmod 600 it" in caplog.text


def test_a_key_added_to_the_file_is_read_when_first_needed(tmp_path: Path) -> None:
    now = [0.0]
    path = _write(tmp_path / "keys", K1.line() + "\n")
    ring = Keyring([K1], source=path, monotonic=lambda: now[0])
    sealed = Keyring([K2]).seal(b"new", CTX)
    _write(path, f"{K1.line()}\n{K2.line()}\n")
    assert ring.open(sealed, CTX, "payload") == b"new"
    assert ring.active == K1  # read for opening; new values still go under the key of the start
    sealed3 = Keyring([EncryptionKey("k3", bytes(32))]).seal(b"x", CTX)
    with pytest.raises(Undecryptable, match="'k3'"):  # not in the file: and not re-read at once
        ring.open(sealed3, CTX, "payload")


# -- the commands -----------------------------------------------------------------------------


def test_keys_generate_appends_keys_the_keyring_reads(tmp_path: Path) -> None:
    path = tmp_path / "keys"
    runner = CliRunner()
    printed = runner.invoke(main, ["keys", "generate", "--id", "solo"])
    assert printed.exit_code == 0 and printed.output.startswith("solo ")
    for key_id in ("a", "b"):
        result = runner.invoke(main, ["keys", "generate", "--id", key_id, "--append", str(path)])
        assert result.exit_code == 0, result.output
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    ring = Keyring.from_file(path)
    assert ring.ids() == ["a", "b"] and ring.active.key_id == "b"
    again = runner.invoke(main, ["keys", "generate", "--id", "a", "--append", str(path)])
    assert again.exit_code == 2 and "has a key 'a' already" in again.output


def test_a_bad_keyring_is_one_error_naming_the_flag(tmp_path: Path) -> None:
    path = _write(tmp_path / "keys", "k1 AAAA\n")
    result = CliRunner().invoke(main, ["node", "--encryption-keys", str(path)])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert "--encryption-keys" in result.output and "key 'k1': 3 bytes, not 32" in result.output

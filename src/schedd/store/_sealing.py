"""Which stored fields are secret, and how they are sealed and opened: the store's codec.

Sealed (each value on its own, see :mod:`._envelope`), bound to its job id and field:

- a job's ``payload``, its HTTP header values, its shell environment values;
- an execution's ``payload_override``, ``checkpoint`` and ``result`` (live runs, dead
  letters, the node's local run history) and the checkpoints of ``ckpt/`` keys.

Everything else stays readable: ids, names, tenants, labels, schedules, policies, states,
times, HTTP URL and method, shell argv and cwd, error texts. A :class:`Sealer` without a
keyring writes plaintext, and still recognises sealed values when it reads them.

Reads are *strict* (a value that does not open raises
:class:`~schedd._errors.Undecryptable`: what the client API returns) or *lenient* (the value
is left sealed and :attr:`Sealer.failures` counts it: what a partition owner loads, so one bad
record does not stop a partition; the firer then refuses to dispatch what is still sealed,
see :meth:`Sealer.reopen`). Writing a value that is still sealed keeps it as it is, so a
record read leniently can be written back.
"""

from __future__ import annotations

import base64
import logging

from schedd._errors import Undecryptable
from schedd.store._envelope import (
    TEXT_MAGIC,
    Keyring,
    is_sealed,
    is_sealed_text,
    key_id_of,
    no_keyring,
    text_key_id_of,
)
from schedd.store._records import decode_execution, encode_execution
from schedd.v1 import execution_pb2, job_pb2

log = logging.getLogger(__name__)

#: The sealed fields of an execution (bytes, all of them).
EXECUTION_FIELDS = ("payload_override", "checkpoint", "result")
#: Those a dispatch carries to a worker.
_DISPATCHED = ("payload_override", "checkpoint")


def field_context(job_id: str, field: str) -> bytes:
    """What a sealed value is bound to: its job and its field (``job.payload``,
    ``job.http.headers[Authorization]``, ``execution[1700000000000].checkpoint``)."""
    return f"{job_id}\x00{field}".encode()


def checkpoint_field(scheduled_ms: int) -> str:
    return f"execution[{scheduled_ms}].checkpoint"


def _execution_field(ex: execution_pb2.Execution, name: str) -> str:
    return f"execution[{ex.scheduled_ms}].{name}"


class Sealer:
    """Seals secret fields on their way into the store and opens them on the way out.

    Attributes:
        keyring: the keys (None: nothing is sealed, and sealed values cannot be opened).
        failures: values lenient reads left sealed since this was made (while 0, nothing in
            memory is sealed, and the firer checks nothing).
    """

    def __init__(self, keyring: Keyring | None = None) -> None:
        self.keyring = keyring
        self.failures = 0

    # -- single values ------------------------------------------------------------------------

    def seal(self, value: bytes, job_id: str, field: str) -> bytes:
        """``value`` sealed for this job and field (as it is: empty, already sealed, or no
        keyring)."""
        if not value or self.keyring is None or is_sealed(value):
            return value
        return self.keyring.seal(value, field_context(job_id, field))

    def open(self, value: bytes, job_id: str, field: str) -> bytes:
        """The plaintext of ``value`` (plaintext as it is).

        Raises:
            Undecryptable: it is sealed and does not open here.
        """
        if not is_sealed(value):
            return value
        what = f"job {job_id!r} {field}"
        if self.keyring is None:
            raise no_keyring(value, what)
        return self.keyring.open(value, field_context(job_id, field), what)

    def seal_text(self, value: str, job_id: str, field: str) -> str:
        if not value or self.keyring is None or is_sealed_text(value):
            return value
        sealed = self.keyring.seal(value.encode(), field_context(job_id, field))
        return TEXT_MAGIC + base64.b64encode(sealed).decode()

    def open_text(self, value: str, job_id: str, field: str) -> str:
        if not is_sealed_text(value):
            return value
        try:
            raw = base64.b64decode(value[len(TEXT_MAGIC) :], validate=True)
        except ValueError:
            raise Undecryptable(f"job {job_id!r} {field}", "", "not a valid envelope") from None
        return self.open(raw, job_id, field).decode()

    # -- jobs ---------------------------------------------------------------------------------

    def job_value(self, job: job_pb2.Job) -> bytes:
        """The stored bytes of ``job``, its secret fields sealed (``job`` is not changed)."""
        if self.keyring is None or not _has_secrets(job):
            return job.SerializeToString()
        sealed = job_pb2.Job()
        sealed.CopyFrom(job)
        jid = job.id
        sealed.payload = self.seal(job.payload, jid, "job.payload")
        kind = job.WhichOneof("target")
        if kind == "http":
            headers = sealed.http.headers
            for name, value in job.http.headers.items():
                headers[name] = self.seal_text(value, jid, f"job.http.headers[{name}]")
        elif kind == "shell":
            env = sealed.shell.env
            for name, value in job.shell.env.items():
                env[name] = self.seal_text(value, jid, f"job.shell.env[{name}]")
        return sealed.SerializeToString()

    def read_job(self, raw: bytes) -> job_pb2.Job:
        """A stored job, its secrets opened.

        Raises:
            Undecryptable: one does not open here.
        """
        job = job_pb2.Job.FromString(raw)
        self._open_job(job, strict=True)
        return job

    def open_job(self, job: job_pb2.Job) -> None:
        """Opens the secrets of a job read as it is stored, in place.

        Raises:
            Undecryptable: one does not open here.
        """
        self._open_job(job, strict=True)

    def read_job_lenient(self, raw: bytes) -> job_pb2.Job:
        """A stored job, its secrets opened where they open (the others stay sealed and are
        counted in :attr:`failures`)."""
        job = job_pb2.Job.FromString(raw)
        self._open_job(job, strict=False)
        return job

    def _open_job(self, job: job_pb2.Job, *, strict: bool) -> str:
        """Opens what is sealed of ``job`` in place; returns the first problem ("": none)."""
        problem = ""
        jid = job.id
        if is_sealed(job.payload):
            try:
                job.payload = self.open(job.payload, jid, "job.payload")
            except Undecryptable as exc:
                problem = self._failed(exc, strict)
        kind = job.WhichOneof("target")
        texts = (
            (job.http.headers, "job.http.headers")
            if kind == "http"
            else (job.shell.env, "job.shell.env")
            if kind == "shell"
            else None
        )
        if texts is not None:
            values, name = texts
            for key, value in list(values.items()):
                if is_sealed_text(value):
                    try:
                        values[key] = self.open_text(value, jid, f"{name}[{key}]")
                    except Undecryptable as exc:
                        problem = problem or self._failed(exc, strict)
        return problem

    def _failed(self, exc: Undecryptable, strict: bool) -> str:
        if strict:
            raise exc
        self.failures += 1
        log.error("left encrypted: %s", exc)
        return str(exc)

    # -- executions and checkpoints -----------------------------------------------------------

    def execution_value(self, ex: execution_pb2.Execution) -> bytes:
        """The stored bytes of a live run or dead letter: secrets sealed, token left out (see
        :func:`encode_execution`); ``ex`` is not changed."""
        if self.keyring is None or not (ex.payload_override or ex.checkpoint or ex.result):
            return encode_execution(ex)
        return encode_execution(self._sealed_copy(ex))

    def _sealed_copy(self, ex: execution_pb2.Execution) -> execution_pb2.Execution:
        sealed = execution_pb2.Execution()
        sealed.CopyFrom(ex)
        jid = ex.job_id
        for name in EXECUTION_FIELDS:
            value = getattr(ex, name)
            if value:
                setattr(sealed, name, self.seal(value, jid, _execution_field(ex, name)))
        return sealed

    def read_execution(self, raw: bytes, mod_revision: int) -> execution_pb2.Execution:
        """A stored execution, its secrets opened, its token the key's mod revision.

        Raises:
            Undecryptable: a secret does not open here.
        """
        ex = decode_execution(raw, mod_revision)
        if ex.payload_override or ex.checkpoint or ex.result:
            self._open_execution(ex, strict=True)
        return ex

    def read_execution_lenient(self, raw: bytes, mod_revision: int) -> execution_pb2.Execution:
        """Like :meth:`read_execution`, leaving what does not open sealed (counted)."""
        ex = decode_execution(raw, mod_revision)
        if ex.payload_override or ex.checkpoint or ex.result:
            self._open_execution(ex, strict=False)
        return ex

    def _open_execution(
        self,
        ex: execution_pb2.Execution,
        *,
        strict: bool,
        fields: tuple[str, ...] = EXECUTION_FIELDS,
    ) -> str:
        problem = ""
        for name in fields:
            value = getattr(ex, name)
            if is_sealed(value):
                try:
                    setattr(ex, name, self.open(value, ex.job_id, _execution_field(ex, name)))
                except Undecryptable as exc:
                    problem = problem or self._failed(exc, strict)
        return problem

    def checkpoint_value(self, ex: execution_pb2.Execution) -> bytes:
        """The stored bytes of ``ex.checkpoint`` at its ``ckpt/`` key."""
        return self.seal(ex.checkpoint, ex.job_id, checkpoint_field(ex.scheduled_ms))

    def read_checkpoint_lenient(self, value: bytes, job_id: str, scheduled_ms: int) -> bytes:
        if not is_sealed(value):
            return value
        try:
            return self.open(value, job_id, checkpoint_field(scheduled_ms))
        except Undecryptable as exc:
            self._failed(exc, strict=False)
            return value

    # -- before a dispatch ----------------------------------------------------------------------

    def reopen(self, job: job_pb2.Job | None, ex: execution_pb2.Execution) -> tuple[bool, str]:
        """Opens in place what a lenient read left sealed of a job and its execution (the key
        may have come since, see :class:`Keyring`).

        Returns:
            (whether anything was sealed, the first value that still does not open: "" when
            all of it is plaintext now). Nothing still sealed may reach a worker.
        """
        found = is_sealed(ex.payload_override) or is_sealed(ex.checkpoint)
        problem = self._open_execution(ex, strict=False, fields=_DISPATCHED) if found else ""
        if job is not None and _sealed_in(job):
            found = True
            problem = problem or self._open_job(job, strict=False)
        return found, problem

    # -- the node's run history -----------------------------------------------------------------

    def history_value(self, ex: execution_pb2.Execution) -> bytes:
        """A finished execution as the local history stores it: secrets sealed, token kept."""
        if self.keyring is None or not (ex.payload_override or ex.checkpoint or ex.result):
            return ex.SerializeToString()
        return self._sealed_copy(ex).SerializeToString()

    def read_history(self, raw: bytes) -> execution_pb2.Execution:
        """A history record; a secret that does not open here is emptied (never shown
        sealed; an old key left the keyring before the history's TTL passed)."""
        ex = execution_pb2.Execution.FromString(raw)
        for name in EXECUTION_FIELDS:
            value = getattr(ex, name)
            if value and is_sealed(value):
                try:
                    setattr(ex, name, self.open(value, ex.job_id, _execution_field(ex, name)))
                except Undecryptable as exc:  # nothing of it stays in memory: not a failure
                    log.warning("run history: %s; left out", exc)
                    ex.ClearField(name)  # type: ignore[arg-type]
        return ex


def _has_secrets(job: job_pb2.Job) -> bool:
    kind = job.WhichOneof("target")
    return bool(
        job.payload or (kind == "http" and job.http.headers) or (kind == "shell" and job.shell.env)
    )


def _sealed_in(job: job_pb2.Job) -> bool:
    if is_sealed(job.payload):
        return True
    kind = job.WhichOneof("target")
    if kind == "http":
        return any(is_sealed_text(v) for v in job.http.headers.values())
    if kind == "shell":
        return any(is_sealed_text(v) for v in job.shell.env.values())
    return False


def key_ids_in_job(job: job_pb2.Job) -> set[str]:
    """The key ids the sealed fields of a stored job name ("" for plaintext secrets)."""
    ids = set()
    if job.payload:
        ids.add(key_id_of(job.payload))
    kind = job.WhichOneof("target")
    values = (
        job.http.headers.values()
        if kind == "http"
        else job.shell.env.values()
        if kind == "shell"
        else ()
    )
    for value in values:
        if value:
            ids.add(text_key_id_of(value) if is_sealed_text(value) else "")
    return ids


def key_ids_in_execution(ex: execution_pb2.Execution) -> set[str]:
    """The key ids the sealed fields of a stored execution name ("" for plaintext ones)."""
    return {key_id_of(v) for v in (ex.payload_override, ex.checkpoint, ex.result) if v}

"""The one error hierarchy of schedd.

Every error a caller may want to handle derives from :class:`SchedError`. Each subclass maps to
one gRPC status code (:data:`GRPC_CODE_NAMES`), so servicers translate errors in one place and
clients map status codes back to the same classes.
"""

from __future__ import annotations


class SchedError(Exception):
    """Root of every schedd error."""

    #: Name of the grpc.StatusCode this error travels as.
    grpc_code = "INTERNAL"
    #: Whether retrying the same call later may succeed.
    transient = False


class InvalidArgument(SchedError):
    """Bad input: ``field`` names the offending field (dotted path), ``message`` says why."""

    grpc_code = "INVALID_ARGUMENT"

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}" if field else message)
        self.field = field
        self.reason = message


class InvalidSchedule(InvalidArgument):
    """A schedule expression or time zone that cannot be used."""

    def __init__(self, message: str, field: str = "schedule.expr") -> None:
        super().__init__(field, message)


class NotFound(SchedError):
    grpc_code = "NOT_FOUND"


class JobNotFound(NotFound):
    def __init__(self, job_id: str) -> None:
        super().__init__(f"job {job_id!r} not found")
        self.job_id = job_id


class ExecutionNotFound(NotFound):
    def __init__(self, execution_id: str) -> None:
        super().__init__(f"execution {execution_id!r} not found")
        self.execution_id = execution_id


class AlreadyExists(SchedError):
    grpc_code = "ALREADY_EXISTS"


class FailedPrecondition(SchedError):
    grpc_code = "FAILED_PRECONDITION"


class StaleToken(FailedPrecondition):
    """A result or heartbeat carried a fencing token that is no longer current."""

    def __init__(self, execution_id: str, token: int, current: int | None) -> None:
        cur = "none (finished or unknown)" if current is None else str(current)
        super().__init__(f"execution {execution_id!r}: token {token} is stale (current: {cur})")
        self.execution_id = execution_id
        self.token = token
        self.current = current


class Undecryptable(FailedPrecondition):
    """A stored value is encrypted and cannot be decrypted here.

    ``key_id`` names the key it was encrypted with ("" when the value is not even a valid
    envelope); ``what`` names the field (``job 'j1' job.payload``).
    """

    def __init__(self, what: str, key_id: str, why: str) -> None:
        super().__init__(f"{what}: {why}")
        self.what = what
        self.key_id = key_id
        self.why = why


class EncryptionKeyError(FailedPrecondition):
    """This process's encryption keys do not fit the cluster's (a key in use is missing, or is
    not the key the records were written with), or a keyring file cannot be used."""


class Conflict(SchedError):
    """A compare failed (a concurrent writer): re-read and retry."""

    grpc_code = "ABORTED"
    transient = True


class FencedOut(SchedError):
    """This node's partition epoch is no longer current: another owner took the partition."""

    grpc_code = "FAILED_PRECONDITION"

    def __init__(self, partition: int, epoch: int) -> None:
        super().__init__(f"partition {partition}: epoch {epoch} is no longer current")
        self.partition = partition
        self.epoch = epoch


class Unavailable(SchedError):
    """etcd, a node or a worker cannot be reached now."""

    grpc_code = "UNAVAILABLE"
    transient = True


class TlsHandshakeFailed(Unavailable):
    """A node and this client did not agree on TLS (a plaintext client and a TLS node, a
    certificate not trusted, a client certificate missing or refused); the message says
    which, for every node tried.

    Attributes:
        endpoint: The node's ``HOST:PORT`` (the first one that failed so, with several).
        mismatch: Which way they disagreed: the name of a ``schedd._handshake.Mismatch``
            (``SPEAKS_TLS``, ``PLAINTEXT``, ``UNTRUSTED``, ``WRONG_NAME``, ``CERT_REQUIRED``,
            ``CERT_REFUSED``).
        detail: What the TLS library said, if anything ("unable to get local issuer
            certificate").
    """

    transient = False

    def __init__(self, message: str, endpoint: str, mismatch: str, detail: str = "") -> None:
        super().__init__(message)
        self.endpoint = endpoint
        self.mismatch = mismatch
        self.detail = detail


class ResourceExhausted(SchedError):
    grpc_code = "RESOURCE_EXHAUSTED"
    transient = True

    def __init__(self, message: str, retry_after_s: float = 1.0) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class Unauthenticated(SchedError):
    """No credentials, or ones that are not valid (unknown, expired or revoked token)."""

    grpc_code = "UNAUTHENTICATED"


class PermissionDenied(SchedError):
    """Valid credentials that do not allow this call."""

    grpc_code = "PERMISSION_DENIED"


class DeadlineExceeded(SchedError):
    grpc_code = "DEADLINE_EXCEEDED"
    transient = True


#: grpc status code name -> error class, for clients mapping statuses back.
GRPC_CODE_TO_ERROR: dict[str, type[SchedError]] = {
    "INVALID_ARGUMENT": InvalidArgument,
    "NOT_FOUND": NotFound,
    "ALREADY_EXISTS": AlreadyExists,
    "FAILED_PRECONDITION": FailedPrecondition,
    "ABORTED": Conflict,
    "UNAVAILABLE": Unavailable,
    "RESOURCE_EXHAUSTED": ResourceExhausted,
    "DEADLINE_EXCEEDED": DeadlineExceeded,
    "UNAUTHENTICATED": Unauthenticated,
    "PERMISSION_DENIED": PermissionDenied,
}

"""schedd: a distributed job scheduler.

The public face: errors and time here, the client in :mod:`schedd.client`, the worker SDK in
:mod:`schedd.worker`, schedule math in :mod:`schedd.schedule`, and the wire types in
:mod:`schedd.v1`.
"""

from schedd._clock import Clock, ManualClock, SystemClock
from schedd._errors import (
    AlreadyExists,
    Conflict,
    DeadlineExceeded,
    ExecutionNotFound,
    FailedPrecondition,
    FencedOut,
    InvalidArgument,
    InvalidSchedule,
    JobNotFound,
    NotFound,
    PermissionDenied,
    ResourceExhausted,
    SchedError,
    StaleToken,
    TlsHandshakeFailed,
    Unauthenticated,
    Unavailable,
)

__version__ = "0.1.0"

__all__ = [
    "AlreadyExists",
    "Clock",
    "Conflict",
    "DeadlineExceeded",
    "ExecutionNotFound",
    "FailedPrecondition",
    "FencedOut",
    "InvalidArgument",
    "InvalidSchedule",
    "JobNotFound",
    "ManualClock",
    "NotFound",
    "PermissionDenied",
    "ResourceExhausted",
    "SchedError",
    "StaleToken",
    "SystemClock",
    "TlsHandshakeFailed",
    "Unauthenticated",
    "Unavailable",
    "__version__",
]

"""Errors on the wire, in one place both ways.

A servicer turns a :class:`~schedd.SchedError` into a rich gRPC status with
:func:`to_grpc_status` / :func:`abort_with`; a client turns the :class:`grpc.RpcError` it gets
back into the same error class with :func:`from_rpc_error`. ``INVALID_ARGUMENT`` carries a
``google.rpc.BadRequest`` whose one field violation names the offending field, and
``RESOURCE_EXHAUSTED`` carries ``google.rpc.RetryInfo``, so both survive the round trip::

    status = to_grpc_status(InvalidArgument("job.name", "must not be empty"))
    # client side, after the call failed:
    err = from_rpc_error(exc)   # InvalidArgument, err.field == "job.name"
"""

from __future__ import annotations

from typing import Any, NoReturn

import grpc
import grpc.aio
from google.protobuf import any_pb2, duration_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2  # type: ignore[import-untyped]
from grpc_status import rpc_status

from schedd._errors import (
    GRPC_CODE_TO_ERROR,
    DeadlineExceeded,
    InvalidArgument,
    ResourceExhausted,
    SchedError,
    Unavailable,
)
from schedd.v1 import scheduler_pb2

__all__ = [
    "abort_with",
    "error_from_code",
    "from_rpc_error",
    "item_error",
    "item_error_to_exception",
    "to_grpc_status",
]


def _code(err: SchedError) -> grpc.StatusCode:
    return getattr(grpc.StatusCode, err.grpc_code, grpc.StatusCode.INTERNAL)


def _message(err: SchedError) -> str:
    if isinstance(err, InvalidArgument):
        return err.reason
    return str(err) or type(err).__name__


def to_grpc_status(err: SchedError) -> grpc.Status:
    """The rich gRPC status ``err`` travels as.

    Args:
        err: Any schedd error.

    Returns:
        A status whose code is ``err.grpc_code``; for :class:`InvalidArgument` the details hold
        a ``BadRequest`` with one ``FieldViolation(field, reason)`` and the message is
        ``"field: reason"``; for :class:`ResourceExhausted` they hold a ``RetryInfo``.
    """
    code = _code(err)
    proto = status_pb2.Status(code=code.value[0], message=str(err) or type(err).__name__)
    if isinstance(err, InvalidArgument):
        detail = any_pb2.Any()
        detail.Pack(
            error_details_pb2.BadRequest(
                field_violations=[
                    error_details_pb2.BadRequest.FieldViolation(
                        field=err.field, description=err.reason
                    )
                ]
            )
        )
        proto.details.append(detail)
    elif isinstance(err, ResourceExhausted):
        delay = duration_pb2.Duration()
        delay.FromNanoseconds(int(err.retry_after_s * 1e9))
        detail = any_pb2.Any()
        detail.Pack(error_details_pb2.RetryInfo(retry_delay=delay))
        proto.details.append(detail)
    return rpc_status.to_status(proto)  # type: ignore[no-any-return]


async def abort_with(context: grpc.aio.ServicerContext[Any, Any], err: SchedError) -> NoReturn:
    """Abort the current RPC with the status of ``err`` (never returns)."""
    await context.abort_with_status(to_grpc_status(err))
    raise AssertionError("abort_with_status returned")  # pragma: no cover


def error_from_code(code_name: str, message: str, field: str = "") -> SchedError:
    """Rebuild the schedd error for a status code name (``"NOT_FOUND"``) and message."""
    if code_name == "INVALID_ARGUMENT":
        prefix = f"{field}: "
        reason = message[len(prefix) :] if field and message.startswith(prefix) else message
        return InvalidArgument(field, reason)
    if code_name == "RESOURCE_EXHAUSTED":
        return ResourceExhausted(message)
    cls = GRPC_CODE_TO_ERROR.get(code_name)
    if cls is None:
        err = SchedError(f"{code_name}: {message}" if message else code_name)
        err.grpc_code = code_name
        return err
    return cls(message)


def _details(exc: grpc.RpcError) -> list[any_pb2.Any]:
    try:
        status = rpc_status.from_call(exc)
    except (ValueError, AttributeError, TypeError):
        return []
    return list(status.details) if status is not None else []


def _field_violation(details: list[any_pb2.Any]) -> tuple[str, str] | None:
    for detail in details:
        if detail.Is(error_details_pb2.BadRequest.DESCRIPTOR):
            bad = error_details_pb2.BadRequest()
            detail.Unpack(bad)
            for violation in bad.field_violations:
                return violation.field, violation.description
    return None


def _retry_after(details: list[any_pb2.Any]) -> float | None:
    for detail in details:
        if detail.Is(error_details_pb2.RetryInfo.DESCRIPTOR):
            info = error_details_pb2.RetryInfo()
            detail.Unpack(info)
            return float(info.retry_delay.ToNanoseconds()) / 1e9
    return None


def from_rpc_error(exc: grpc.RpcError) -> SchedError:
    """The schedd error a failed call stands for (the inverse of :func:`to_grpc_status`).

    A connection failure (UNAVAILABLE without a server) becomes :class:`Unavailable`, an
    expired deadline :class:`DeadlineExceeded`; codes schedd does not use become a plain
    :class:`SchedError` whose message names the code.
    """
    code_fn = getattr(exc, "code", None)
    details_fn = getattr(exc, "details", None)
    code = code_fn() if callable(code_fn) else None
    message = (details_fn() if callable(details_fn) else None) or ""
    if not isinstance(code, grpc.StatusCode):
        return SchedError(message or str(exc))
    name = code.name
    if name == "UNAVAILABLE":
        return Unavailable(message or "server unavailable")
    if name == "DEADLINE_EXCEEDED":
        return DeadlineExceeded(message or "deadline exceeded")
    details = _details(exc)
    if name == "INVALID_ARGUMENT":
        violation = _field_violation(details)
        if violation is not None:
            return InvalidArgument(*violation)
        return InvalidArgument("", message)
    if name == "RESOURCE_EXHAUSTED":
        retry_after = _retry_after(details)
        exhausted = ResourceExhausted(message, 1.0 if retry_after is None else retry_after)
        if "larger than max" in message:  # gRPC's message size limit: the same call fails again
            exhausted.transient = False
        return exhausted
    return error_from_code(name, message)


def item_error(err: SchedError) -> scheduler_pb2.ItemError:
    """The per-item error of a batch result for ``err``."""
    field = err.field if isinstance(err, InvalidArgument) else ""
    return scheduler_pb2.ItemError(code=_code(err).value[0], message=_message(err), field=field)


def item_error_to_exception(item: scheduler_pb2.ItemError) -> SchedError:
    """Inverse of :func:`item_error`: the schedd error a batch item failed with."""
    name = code_pb2.Code.Name(item.code) if item.code in code_pb2.Code.values() else "UNKNOWN"
    return error_from_code(name, item.message, item.field)

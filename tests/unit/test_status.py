"""Errors survive the wire: each error class through a real grpc.aio server and back."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import grpc
import grpc.aio
import pytest

from schedd import (
    AlreadyExists,
    Conflict,
    DeadlineExceeded,
    FailedPrecondition,
    InvalidArgument,
    InvalidSchedule,
    JobNotFound,
    NotFound,
    ResourceExhausted,
    SchedError,
    StaleToken,
    Unavailable,
)
from schedd._status import (
    abort_with,
    error_from_code,
    from_rpc_error,
    item_error,
    item_error_to_exception,
    to_grpc_status,
)

_ERRORS: dict[str, SchedError] = {
    "invalid": InvalidArgument("job.schedule.expr", "bad cron"),
    "schedule": InvalidSchedule("unknown zone", field="job.schedule.timezone"),
    "notfound": JobNotFound("j-1"),
    "exists": AlreadyExists("job exists"),
    "conflict": Conflict("version changed"),
    "precondition": StaleToken("j@1", 3, 4),
    "unavailable": Unavailable("etcd lost"),
    "exhausted": ResourceExhausted("slow down", retry_after_s=2.5),
    "deadline": DeadlineExceeded("too slow"),
    "internal": SchedError("boom"),
}


def _make_handler(err: SchedError) -> grpc.RpcMethodHandler:
    async def handle(request: bytes, context: grpc.aio.ServicerContext[Any, Any]) -> bytes:
        await abort_with(context, err)

    return grpc.unary_unary_rpc_method_handler(handle)


@pytest.fixture
async def channel() -> AsyncIterator[grpc.aio.Channel]:
    server = grpc.aio.server()
    handlers = {name: _make_handler(err) for name, err in _ERRORS.items()}
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("t.Errors", handlers),))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as ch:
        yield ch
    await server.stop(None)


async def _call(channel: grpc.aio.Channel, name: str) -> SchedError:
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await channel.unary_unary(f"/t.Errors/{name}")(b"", timeout=5)
    return from_rpc_error(info.value)


@pytest.mark.parametrize(
    ("name", "cls"),
    [
        ("invalid", InvalidArgument),
        ("schedule", InvalidArgument),
        ("notfound", NotFound),
        ("exists", AlreadyExists),
        ("conflict", Conflict),
        ("precondition", FailedPrecondition),
        ("unavailable", Unavailable),
        ("exhausted", ResourceExhausted),
        ("deadline", DeadlineExceeded),
    ],
)
async def test_round_trip_keeps_class_and_message(
    channel: grpc.aio.Channel, name: str, cls: type[SchedError]
) -> None:
    err = await _call(channel, name)
    assert type(err) is cls
    original = _ERRORS[name]
    if isinstance(original, InvalidArgument):
        assert isinstance(err, InvalidArgument)
        assert err.field == original.field
        assert err.reason == original.reason
    else:
        assert str(err) == str(original)


async def test_round_trip_invalid_argument_field(channel: grpc.aio.Channel) -> None:
    err = await _call(channel, "invalid")
    assert isinstance(err, InvalidArgument)
    assert (err.field, err.reason) == ("job.schedule.expr", "bad cron")
    assert str(err) == "job.schedule.expr: bad cron"


async def test_round_trip_retry_info(channel: grpc.aio.Channel) -> None:
    err = await _call(channel, "exhausted")
    assert isinstance(err, ResourceExhausted)
    assert err.retry_after_s == pytest.approx(2.5)


async def test_internal_is_plain_sched_error(channel: grpc.aio.Channel) -> None:
    err = await _call(channel, "internal")
    assert type(err) is SchedError
    assert "boom" in str(err)


async def test_connection_failure_is_unavailable() -> None:
    async with grpc.aio.insecure_channel("127.0.0.1:1") as ch:
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await ch.unary_unary("/t.Errors/x")(b"", timeout=2)
    assert isinstance(from_rpc_error(info.value), Unavailable)


def test_to_grpc_status_codes() -> None:
    assert to_grpc_status(JobNotFound("x")).code == grpc.StatusCode.NOT_FOUND
    assert to_grpc_status(Conflict("c")).code == grpc.StatusCode.ABORTED
    status = to_grpc_status(InvalidArgument("job.name", "must not be empty"))
    assert status.code == grpc.StatusCode.INVALID_ARGUMENT
    assert status.details == "job.name: must not be empty"


def test_item_error_round_trip() -> None:
    item = item_error(InvalidArgument("job.payload", "too big"))
    assert (item.code, item.field, item.message) == (3, "job.payload", "too big")
    back = item_error_to_exception(item)
    assert isinstance(back, InvalidArgument)
    assert (back.field, back.reason) == ("job.payload", "too big")
    assert isinstance(item_error_to_exception(item_error(AlreadyExists("dup"))), AlreadyExists)
    unknown = error_from_code("DATA_LOSS", "gone")
    assert type(unknown) is SchedError
    assert "DATA_LOSS" in str(unknown)

"""The Worker gRPC servicer: a thin adapter from stream messages to the Dispatcher."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Protocol

import grpc
import grpc.aio

from schedd._errors import InvalidArgument, SchedError
from schedd._metadata import AUTHORIZATION, metadata_value
from schedd._status import abort_with
from schedd.auth import Caller, worker_scope
from schedd.dispatch._session import WorkerSession
from schedd.v1 import worker_pb2, worker_pb2_grpc

log = logging.getLogger(__name__)


class StreamEndpoint(Protocol):
    """What the servicer needs from the node's end of the worker streams (the Dispatcher)."""

    def open_session(
        self, hello: worker_pb2.Hello, *, tenants: frozenset[str] | None = None, actor: str = ""
    ) -> WorkerSession:
        """Register a stream that said ``hello`` (its token limited to ``tenants``, None: any;
        ``actor`` its token id); raises InvalidArgument for a bad Hello."""
        ...

    def welcome(self) -> worker_pb2.Welcome:
        """The Welcome that answers a Hello."""
        ...

    async def handle_batch(self, session: WorkerSession, batch: worker_pb2.WorkerBatch) -> None:
        """Apply one WorkerBatch; raises InvalidArgument for a bad one."""
        ...

    def close_session(self, session: WorkerSession) -> None:
        """The stream ended."""
        ...


class WorkerStreamServicer(worker_pb2_grpc.WorkerServicer):
    """``Worker.Connect``: Hello → Welcome, then batches both ways until either side ends.

    A first message that is not a Hello, a bad Hello, a second Hello or a message of unknown
    kind aborts the stream with INVALID_ARGUMENT naming the field.
    """

    def __init__(
        self,
        endpoint: StreamEndpoint,
        authorize: Callable[[str | None, str], Awaitable[Caller]] | None = None,
    ) -> None:
        self._d = endpoint
        #: With auth on: who a stream's bearer token is (raises when it is not valid).
        self._authorize = authorize

    async def Connect(
        self,
        request_iterator: AsyncIterator[worker_pb2.WorkerMessage],
        context: grpc.aio.ServicerContext[Any, Any],
    ) -> AsyncIterator[worker_pb2.NodeMessage]:
        hello = await self._read_hello(request_iterator, context)
        tenants: frozenset[str] | None = None
        actor = ""
        if self._authorize is not None:  # auth on: a worker (or admin) token, within its limits
            try:
                bearer = metadata_value(context, AUTHORIZATION)
                caller = await self._authorize(bearer, context.peer())
                tenants = worker_scope(caller, list(hello.queues))
                actor = caller.actor
            except SchedError as err:
                log.warning("worker %s refused: %s", hello.worker_id or "?", err)
                await abort_with(context, err)
        try:
            session = self._d.open_session(hello, tenants=tenants, actor=actor)
        except InvalidArgument as e:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(e))
        yield worker_pb2.NodeMessage(welcome=self._d.welcome())
        reader = asyncio.create_task(self._read(session, request_iterator))
        try:
            while (msg := await session.next_message()) is not None:
                yield msg
        finally:
            reader.cancel()
            self._d.close_session(session)
        if session.error is not None:
            await context.abort(grpc.StatusCode[session.error_code], session.error)

    @staticmethod
    async def _read_hello(
        it: AsyncIterator[worker_pb2.WorkerMessage], context: grpc.aio.ServicerContext[Any, Any]
    ) -> worker_pb2.Hello:
        try:
            first = await it.__anext__()
        except StopAsyncIteration:
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT, "hello: the stream ended before a Hello"
            )
        kind = first.WhichOneof("kind")
        if kind != "hello":
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"hello: the first WorkerMessage must be a Hello, got {kind or 'nothing'}",
            )
        return first.hello

    async def _read(
        self, session: WorkerSession, it: AsyncIterator[worker_pb2.WorkerMessage]
    ) -> None:
        """Apply worker messages in order; end the session when the worker is done."""
        error: str | None = None
        try:
            async for msg in it:
                kind = msg.WhichOneof("kind")
                if kind == "batch":
                    await self._d.handle_batch(session, msg.batch)
                elif kind == "hello":
                    error = "hello: sent a second time on the same stream"
                    break
                else:
                    error = f"kind: unknown WorkerMessage kind {kind!r}"
                    break
        except InvalidArgument as e:
            error = str(e)
        except asyncio.CancelledError:
            raise
        except Exception as e:  # the stream broke: the session ends below
            log.debug(
                "worker %s stream read failed: %r", session.worker_id, e,
                extra={"worker": session.worker_id},
            )  # fmt: skip
        session.end(error)

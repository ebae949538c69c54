"""The blocking client: :class:`AsyncClient` run on a private event loop in a thread of its own.

Every method of :class:`Client` is the AsyncClient method of the same name, run to completion:
``create_job = _blocking(AsyncClient.create_job)`` keeps its signature (mypy checks the calls
against it), its docstring and its errors, so each method is written once, in ``_async.py``.
Why a thread rather than ``asyncio.run`` per call: the channel (and its connections) must
outlive a call, and a call must work from code that already runs an event loop.
"""

from __future__ import annotations

import asyncio
import functools
import threading
import weakref
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Coroutine, Iterator, Sequence
from types import TracebackType
from typing import Any, Concatenate, Final, ParamSpec, TypeVar

from schedd.client._async import AsyncClient
from schedd.client._channel import TlsOption

_P = ParamSpec("_P")
_R = TypeVar("_R")
_T = TypeVar("_T")
#: How long closing waits for the channel to close and the loop's thread to end.
_CLOSE_TIMEOUT_S: Final = 5.0
_EXHAUSTED: Final = object()


def _blocking(
    method: Callable[Concatenate[AsyncClient, _P], Coroutine[Any, Any, _R]],
) -> Callable[Concatenate[Client, _P], _R]:
    """``method`` as a Client method that blocks until the AsyncClient call returns."""

    @functools.wraps(method)
    def call(self: Client, /, *args: _P.args, **kwargs: _P.kwargs) -> _R:
        return self._run(method(self._async, *args, **kwargs))

    return call


def _blocking_iter(
    method: Callable[Concatenate[AsyncClient, _P], AsyncGenerator[_T, None]],
) -> Callable[Concatenate[Client, _P], Iterator[_T]]:
    """``method`` (an async generator) as a Client method returning a lazy iterator."""

    @functools.wraps(method)
    def call(self: Client, /, *args: _P.args, **kwargs: _P.kwargs) -> Iterator[_T]:
        items = method(self._async, *args, **kwargs)
        try:
            while (item := self._run(_next(items))) is not _EXHAUSTED:
                yield item
        finally:
            if not self._closed:  # an iteration left early: let the generator clean up
                self._run(items.aclose())

    return call


async def _next(items: AsyncIterator[_T]) -> Any:
    # The sentinel, not StopAsyncIteration, crosses the thread: futures are for results.
    try:
        return await items.__anext__()
    except StopAsyncIteration:
        return _EXHAUSTED


async def _make_async(
    endpoints: str | Sequence[str],
    timeout_s: float,
    tls: TlsOption,
    token: str | None,
) -> AsyncClient:
    # On its loop, in its thread.
    return AsyncClient(endpoints, timeout_s=timeout_s, tls=tls, token=token)


def _shut_down(loop: asyncio.AbstractEventLoop, thread: threading.Thread, client: Any) -> None:
    """Close the channel, stop the loop, end its thread (also when a Client is collected)."""
    if client is not None:
        future = asyncio.run_coroutine_threadsafe(client.close(), loop)
        future.result(timeout=_CLOSE_TIMEOUT_S)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(timeout=_CLOSE_TIMEOUT_S)
    if not thread.is_alive():
        loop.close()


class Client:
    """A blocking client of the Scheduler API: the methods of :class:`AsyncClient`, each
    returning when its call is done (usable from any thread, and from async code).

    Every call has a deadline (``timeout_s``) and raises a :class:`~schedd.SchedError`
    subclass on failure (``NotFound``, ``InvalidArgument`` with its ``field``, ``Unavailable``
    when no node answers, ...). With several endpoints, a node that is down is skipped and
    idempotent calls are sent again to the next one (as in :class:`AsyncClient`)::

        with Client("10.0.0.1:7070,10.0.0.2:7070") as client:
            job = client.create_job("report", schedule="0 9 * * 1-5", tz="Europe/Berlin",
                                    handler="send_report").job

    A Client owns one thread running its event loop until :meth:`close` (or the end of the
    ``with`` block; a Client that is collected unclosed is closed then).
    """

    def __init__(
        self,
        endpoints: str | Sequence[str] = "127.0.0.1:7070",
        *,
        timeout_s: float = 10.0,
        tls: TlsOption = None,
        token: str | None = None,
    ) -> None:
        """Open a channel over every endpoint (the arguments of :class:`AsyncClient`).

        Args:
            endpoints: ``HOST:PORT`` items, as a sequence or comma-separated.
            timeout_s: The deadline of every call, in seconds.
            tls: TLS to the nodes: True (the system's CAs), the path of the CA certificate
                that signed them, or a :class:`~schedd.client.ClientTls` with a client
                certificate (mutual TLS) and a server name::

                    Client("10.0.0.1:7070", tls=ClientTls(ca_file="ca.pem",
                           cert_file="client.pem", key_file="client-key.pem"))

                None: plaintext. A node refusing them fails calls with
                :class:`~schedd.TlsHandshakeFailed`.
            token: an API token (``sdt_...``), sent with every call (clusters with auth on).
        """
        self._closed = False
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="schedd-client", daemon=True
        )
        self._thread.start()
        try:
            self._async = self._run(_make_async(endpoints, timeout_s, tls, token))
        except BaseException:
            _shut_down(self._loop, self._thread, None)
            raise
        self._finalizer = weakref.finalize(self, _shut_down, self._loop, self._thread, self._async)

    @property
    def timeout_s(self) -> float:
        return self._async.timeout_s

    @property
    def target(self) -> str:
        return self._async.target

    @property
    def endpoints(self) -> list[str]:
        """The endpoints, in the order given (a down one is skipped; see AsyncClient)."""
        return self._async.endpoints

    def _run(self, coro: Coroutine[Any, Any, _R]) -> _R:
        if self._closed:
            coro.close()
            raise RuntimeError("this Client is closed")
        future = asyncio.run_coroutine_threadsafe(coro, self._loop)
        try:
            return future.result()
        except BaseException:
            future.cancel()  # e.g. KeyboardInterrupt while waiting: do not leave it running
            raise

    # -- jobs (each the AsyncClient method, blocking) -------------------------------------------
    create = _blocking(AsyncClient.create)
    create_job = _blocking(AsyncClient.create_job)
    create_jobs = _blocking(AsyncClient.create_jobs)
    get_job = _blocking(AsyncClient.get_job)
    get_job_by_name = _blocking(AsyncClient.get_job_by_name)
    find_job = _blocking(AsyncClient.find_job)
    list_jobs_page = _blocking(AsyncClient.list_jobs_page)
    list_jobs = _blocking_iter(AsyncClient.list_jobs)
    update_job = _blocking(AsyncClient.update_job)
    replace_fields = _blocking(AsyncClient.replace_fields)
    delete_job = _blocking(AsyncClient.delete_job)
    pause_job = _blocking(AsyncClient.pause_job)
    resume_job = _blocking(AsyncClient.resume_job)
    trigger_job = _blocking(AsyncClient.trigger_job)
    backfill_job = _blocking(AsyncClient.backfill_job)

    # -- executions -----------------------------------------------------------------------------
    get_execution = _blocking(AsyncClient.get_execution)
    list_executions_page = _blocking(AsyncClient.list_executions_page)
    list_executions = _blocking(AsyncClient.list_executions)
    list_dead_letters = _blocking(AsyncClient.list_dead_letters)
    cancel_execution = _blocking(AsyncClient.cancel_execution)
    redrive = _blocking(AsyncClient.redrive)
    cluster_status = _blocking(AsyncClient.cluster_status)
    list_queues = _blocking(AsyncClient.list_queues)
    set_tenant_limits = _blocking(AsyncClient.set_tenant_limits)
    get_tenant_limits = _blocking(AsyncClient.get_tenant_limits)
    list_tenant_limits = _blocking(AsyncClient.list_tenant_limits)
    delete_tenant_limits = _blocking(AsyncClient.delete_tenant_limits)

    # -- tokens and the audit trail -------------------------------------------------------------
    create_token = _blocking(AsyncClient.create_token)
    list_tokens = _blocking(AsyncClient.list_tokens)
    revoke_token = _blocking(AsyncClient.revoke_token)
    who_am_i = _blocking(AsyncClient.who_am_i)
    list_audit = _blocking(AsyncClient.list_audit)

    # -- lifecycle ------------------------------------------------------------------------------
    def close(self) -> None:
        """Close the channel and end the client's thread (a second call does nothing)."""
        if not self._closed:
            self._closed = True
            self._finalizer()

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


__all__ = ["Client"]

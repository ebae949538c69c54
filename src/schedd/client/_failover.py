"""Client failover: one channel per endpoint, calls tried on the next node when one is down.

Which calls are retried on another node (the rule is :func:`is_idempotent`):

- reads (``GetJob``, ``ListJobs``, ``GetExecution``, ``ListExecutions``, ``ListDeadLetters``,
  ``GetClusterStatus``, and any later ``Get*``/``List*`` method): on UNAVAILABLE or
  DEADLINE_EXCEEDED, whether or not the request left. With several endpoints each try of a read
  gets at most half the time left, so a node that accepts connections but does not answer (a
  stopped process) leaves time for the next one;
- ``CreateJob`` whose job carries an ``idempotency_key``, and ``BatchCreateJobs`` whose jobs all
  carry one: the key lives in etcd, so a second node answers with the job the first one made
  (``created`` False) instead of making another; ``TriggerJob`` with an ``idempotency_key``
  likewise (a second node answers with the execution the first one made);
- every other call (updates, deletes, pause, resume, trigger, backfill, redrive, creates without
  a key) only while its request cannot have left: the endpoint's channel never became ready
  (connection refused, or no connection within ``connect_timeout_s``). Once such a call was
  sent, a failure is reported as it is: a second attempt could apply it twice.

A call with an explicit job id but no key is *not* treated as idempotent: its retry would answer
ALREADY_EXISTS although the first attempt succeeded.

The endpoints are tried from the last one that answered (:class:`Rotation`); a round that
reaches none is followed by a short jittered pause (:class:`Backoff`) and another round, up to
``max_rounds`` and within the call's deadline. When none answers, :class:`~schedd.Unavailable`
names every endpoint and why it failed. An endpoint whose channel failed to connect is asked
why (:func:`schedd._handshake.diagnose`): when TLS is the reason (a plaintext client and a TLS
node, a certificate not trusted, a client certificate missing or refused) the reason says so,
and the error is :class:`~schedd.TlsHandshakeFailed`.
"""

from __future__ import annotations

import asyncio
import functools
import random
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import grpc
import grpc.aio

from schedd._errors import TlsHandshakeFailed, Unavailable
from schedd._handshake import Diagnosis, Mismatch, diagnose
from schedd._tls import TlsFiles
from schedd.client._channel import IDEMPOTENT_METHODS
from schedd.v1 import scheduler_pb2, scheduler_pb2_grpc

_R = TypeVar("_R")

#: Methods that only read: retried on another node on UNAVAILABLE or DEADLINE_EXCEEDED.
READ_METHODS = frozenset(IDEMPOTENT_METHODS)
_RETRYABLE = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)


def is_idempotent(method: str, request: Any) -> bool:
    """Whether ``method`` with ``request`` may be sent twice (see the module docstring)."""
    if method in READ_METHODS or method.startswith(("Get", "List")):
        return True
    if method in ("SetTenantLimits", "RevokeToken", "WhoAmI"):  # the same outcome twice
        return True
    if method == "CreateJob" and isinstance(request, scheduler_pb2.CreateJobRequest):
        return bool(request.job.idempotency_key)
    if method == "TriggerJob" and isinstance(request, scheduler_pb2.TriggerJobRequest):
        return bool(request.idempotency_key)
    if method == "BatchCreateJobs" and isinstance(request, scheduler_pb2.BatchCreateJobsRequest):
        return bool(request.jobs) and all(j.idempotency_key for j in request.jobs)
    return False


class Rotation:
    """The order to try endpoints in: the last one that answered first, then the rest in the
    order given (wrapping around). Remembering the good one keeps a client off a dead node
    after its first failover instead of paying a failed connect on every call.

    Example: endpoints ``[a, b, c]``; ``order()`` is ``[0, 1, 2]``; after ``succeeded(1)`` it
    is ``[1, 2, 0]``.
    """

    def __init__(self, count: int) -> None:
        if count <= 0:
            raise ValueError("a rotation needs at least one endpoint")
        self.count = count
        self.preferred = 0

    def order(self) -> list[int]:
        return [(self.preferred + k) % self.count for k in range(self.count)]

    def succeeded(self, index: int) -> None:
        self.preferred = index


@dataclass
class Backoff:
    """The pause before round ``n`` (n >= 1) of tries: uniform in [0, min(cap, base * 2**(n-1))]
    (full jitter, so clients that lost the same node do not come back in step)."""

    base_s: float = 0.05
    cap_s: float = 0.5
    rng: random.Random = field(default_factory=random.Random)

    def delay(self, round_no: int) -> float:
        return self.rng.uniform(0, min(self.cap_s, self.base_s * 2 ** (round_no - 1)))


async def call_with_failover(
    endpoints: Sequence[str],
    rotation: Rotation,
    *,
    idempotent: bool,
    connect: Callable[[int, float], Awaitable[bool]],
    send: Callable[[int, float], Awaitable[_R]],
    timeout_s: float,
    connect_timeout_s: float,
    backoff: Backoff,
    max_rounds: int = 3,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep,
    unreachable: Callable[[int, float], Awaitable[str]] | None = None,
) -> _R:
    """Send one call to the first endpoint that takes it, in ``rotation`` order.

    Args:
        endpoints: Their names, for the error message.
        rotation: Where to start; told which endpoint answered.
        idempotent: Whether a call that may have been sent may be sent again elsewhere.
        connect: ``connect(i, timeout)``: True once endpoint ``i`` is ready to take a call,
            False when it refused or did not connect within ``timeout`` (nothing was sent).
        send: ``send(i, timeout)``: the call on endpoint ``i``; raises ``grpc.RpcError``.
        timeout_s: The deadline of the whole call, every try included.
        connect_timeout_s: The longest wait for one endpoint to connect.
        backoff: The pause between rounds.
        max_rounds: Rounds over every endpoint before giving up.
        clock, sleep: Monotonic time and waiting (injected by tests).
        unreachable: ``unreachable(i, timeout)``: why endpoint ``i`` did not connect, for the
            error message (default: "not reachable").

    Raises:
        grpc.RpcError: The call failed in a way that is not retried (any answer from a node,
            or any failure of a non-idempotent call after it was sent).
        Unavailable: No endpoint took the call in ``max_rounds`` rounds or before the deadline.
    """
    tries = _Tries(connect, send, idempotent, connect_timeout_s, clock, unreachable)
    deadline = clock() + timeout_s
    why: dict[int, str] = {}
    for round_no in range(max_rounds):
        if round_no:
            pause = min(backoff.delay(round_no), deadline - clock())
            if pause > 0:
                await sleep(pause)
        for i in rotation.order():
            if deadline - clock() <= 0:
                break
            try:
                result = await tries.on(i, deadline, others=rotation.count > 1)
            except _TryNext as e:
                why[i] = e.why
                continue
            rotation.succeeded(i)
            return result
        if deadline - clock() <= 0:
            break
    detail = ", ".join(f"{endpoints[i]} ({why.get(i, 'not tried')})" for i in rotation.order())
    raise Unavailable(f"no scheduler node could serve the call: {detail}")


class _TryNext(Exception):
    """The call did not go through on one endpoint and may go to the next: ``why``."""

    def __init__(self, why: str) -> None:
        super().__init__(why)
        self.why = why


@dataclass(frozen=True)
class _Tries(Generic[_R]):
    """How :func:`call_with_failover` tries one endpoint (its arguments of that name)."""

    connect: Callable[[int, float], Awaitable[bool]]
    send: Callable[[int, float], Awaitable[_R]]
    idempotent: bool
    connect_timeout_s: float
    clock: Callable[[], float]
    unreachable: Callable[[int, float], Awaitable[str]] | None

    async def on(self, i: int, deadline: float, *, others: bool) -> _R:
        """The call on endpoint ``i``, connected first.

        An idempotent call with ``others`` to try takes half the time left, so a node that
        hangs leaves time for the next.

        Raises:
            _TryNext: It did not connect, or an idempotent call failed in a retryable way.
            grpc.RpcError: Any other failure (not retried).
        """
        left = deadline - self.clock()
        if not await self.connect(i, min(left, self.connect_timeout_s)):
            left = deadline - self.clock()
            why = "not reachable"
            if self.unreachable is not None and left > 0:
                why = await self.unreachable(i, left)
            raise _TryNext(why)
        left = deadline - self.clock()
        if self.idempotent and others:
            left /= 2
        try:
            return await self.send(i, max(left, 0.001))
        except grpc.RpcError as exc:
            code = exc.code() if callable(getattr(exc, "code", None)) else None
            if not (self.idempotent and code in _RETRYABLE):
                raise
            raise _TryNext(_describe(exc, code)) from exc


def _describe(exc: grpc.RpcError, code: grpc.StatusCode | None) -> str:
    """``CODE: details`` on one line, cut short: what a node said, for the final message."""
    details_fn = getattr(exc, "details", None)
    details = " ".join(str(details_fn() or "").split()) if callable(details_fn) else ""
    name = code.name if code is not None else "failed"
    return f"{name}: {details[:120]}" if details else name


class FailoverStub:
    """Stands in for a ``SchedulerStub``: ``stub.GetJob(request, timeout=...)`` runs the call
    through :func:`call_with_failover` over one lazily made channel per endpoint.

    Channels reconnect quickly (``grpc.max_reconnect_backoff_ms``) so a node that comes back is
    tried again within a second or so instead of gRPC's default two minutes.
    """

    def __init__(
        self,
        endpoints: Sequence[str],
        targets: Sequence[str],
        make_channel: Callable[[str], grpc.aio.Channel],
        *,
        connect_timeout_s: float = 2.0,
        backoff: Backoff | None = None,
        tls: TlsFiles | None = None,
    ) -> None:
        self.endpoints = list(endpoints)
        self.tls = tls
        # Endpoints whose channel was seen failing (not merely slow) by the latest _ready.
        self._failed: set[int] = set()
        self._targets = list(targets)
        self._make_channel = make_channel
        self._channels: dict[int, grpc.aio.Channel] = {}
        self._stubs: dict[int, scheduler_pb2_grpc.SchedulerStub] = {}
        self.rotation = Rotation(len(self.endpoints))
        self.connect_timeout_s = connect_timeout_s
        self.backoff = backoff or Backoff()

    def __getattr__(self, method: str) -> Callable[..., Awaitable[Any]]:
        if not method[:1].isupper():  # only RPC names; keeps copy/pickle probes sane
            raise AttributeError(method)
        return functools.partial(self._invoke, method)

    async def _invoke(self, method: str, request: Any, *, timeout: float) -> Any:
        async def send(i: int, left: float) -> Any:
            return await getattr(self._stub(i), method)(request, timeout=left)

        diagnoses: dict[int, Diagnosis] = {}

        async def unreachable(i: int, left: float) -> str:
            if i not in self._failed:
                return "not reachable"  # still connecting when its time was up
            diagnosis = await diagnose(self.endpoints[i], self.tls, min(left, 2.0))
            if diagnosis is None:
                return "not reachable"
            diagnoses[i] = diagnosis
            return f"{diagnosis}: {SDK_HINTS[diagnosis.mismatch]}"

        try:
            return await call_with_failover(
                self.endpoints,
                self.rotation,
                idempotent=is_idempotent(method, request),
                connect=self._ready,
                send=send,
                timeout_s=timeout,
                connect_timeout_s=self.connect_timeout_s,
                backoff=self.backoff,
                unreachable=unreachable,
            )
        except Unavailable as exc:
            if not diagnoses:
                raise
            i, first = min(diagnoses.items())
            raise TlsHandshakeFailed(
                str(exc), self.endpoints[i], first.mismatch.name, first.detail
            ) from None

    def _stub(self, i: int) -> scheduler_pb2_grpc.SchedulerStub:
        if i not in self._stubs:
            self._channels[i] = self._make_channel(self._targets[i])
            self._stubs[i] = scheduler_pb2_grpc.SchedulerStub(self._channels[i])
        return self._stubs[i]

    async def _ready(self, i: int, timeout: float) -> bool:
        """Whether endpoint ``i``'s channel is connected, waiting up to ``timeout`` while it
        connects; False at once when it fails to (refused, unresolvable)."""
        self._stub(i)
        self._failed.discard(i)
        channel = self._channels[i]
        loop = asyncio.get_running_loop()
        until = loop.time() + timeout
        state = channel.get_state(try_to_connect=True)
        while state is not grpc.ChannelConnectivity.READY:
            left = until - loop.time()
            if state in _DOWN:
                self._failed.add(i)
                return False
            if left <= 0:
                return False
            try:
                await asyncio.wait_for(channel.wait_for_state_change(state), left)
            except TimeoutError:
                return False
            state = channel.get_state(try_to_connect=True)
        return True

    async def close(self) -> None:
        channels, self._channels, self._stubs = self._channels, {}, {}
        await asyncio.gather(*(c.close() for c in channels.values()), return_exceptions=True)


_DOWN = (grpc.ChannelConnectivity.TRANSIENT_FAILURE, grpc.ChannelConnectivity.SHUTDOWN)

#: What an SDK caller can do about each TLS mismatch (appended to its reason).
SDK_HINTS = {
    Mismatch.SPEAKS_TLS: "connect with TLS (tls=True, the CA file, or a ClientTls)",
    Mismatch.PLAINTEXT: "connect without tls=",
    Mismatch.UNTRUSTED: "give the CA that signed the nodes' certificates (ClientTls(ca_file=...))",
    Mismatch.WRONG_NAME: "give the name they hold (ClientTls(server_name=...))",
    Mismatch.CERT_REQUIRED: "give one (ClientTls(cert_file=..., key_file=...))",
    Mismatch.CERT_REFUSED: "give one signed by the CA the nodes trust",
}

"""The HTTP executor: runs ``http`` jobs (webhooks) with aiohttp on the worker's event loop.

One request per attempt: the job's method (POST when empty) to its URL, the job's headers,
the payload as the body, the attempt's deadline as its timeout (the worker cancels the
request when it passes). schedd adds, and a job's headers cannot replace:

* ``Idempotency-Key`` and ``X-Schedd-Execution-Id``: the execution id, the same for every
  attempt and redelivery of one fire, so the target can drop a repeat;
* ``X-Schedd-Fencing-Token``: strictly larger for each newer attempt, so the target can
  refuse a write from an older one;
* ``X-Schedd-Attempt``, ``X-Schedd-Scheduled-At`` (RFC 3339, UTC), ``X-Schedd-Job-Id`` and
  ``X-Schedd-Tenant``.

The attempt's output (``schedctl run get ID -o json``, field ``result``) is JSON: ``status``,
``duration_ms``, ``url`` (after redirects), ``redirects``, ``body`` (the first
``body_limit`` bytes, 4 KiB by default, decoded as UTF-8 with replacement) and ``truncated``.

What is retried, which targets may be called, the circuit breaker and the bulkhead per host:
see :mod:`schedd.worker._http_policy`. Redirects are followed by hand, at most
``max_redirects``, each hop checked like the first (scheme, allow-list, addresses);
``Authorization`` and ``Cookie`` headers are not sent to another host. Names are resolved
through a resolver that drops refused addresses, so a name that resolves to the metadata
service is refused too, whatever the URL says. TLS certificates are verified (against the
system's CAs, or ``ca_file``).
"""

from __future__ import annotations

import asyncio
import json
import math
import socket
import ssl
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import aiohttp
from aiohttp.abc import AbstractResolver, ResolveResult
from aiohttp.resolver import ThreadedResolver
from yarl import URL

import schedd
from schedd.v1 import job_pb2, worker_pb2
from schedd.worker._context import Context
from schedd.worker._executor import Outcome, Runtime, error_text
from schedd.worker._http_policy import (
    Bulkheads,
    CircuitBreakers,
    Verdict,
    blocked_reason,
    classify_status,
    host_allowed,
    parse_retry_after,
)

_REDIRECTS = frozenset({301, 302, 303, 307, 308})
_PRIVATE_HEADERS = ("authorization", "cookie", "proxy-authorization")


@dataclass(frozen=True, slots=True)
class HttpConfig:
    """How a worker calls HTTP targets (``schedd worker --http-*`` flags)."""

    #: Hosts that may be called (empty: any); ``*.example.com`` for subdomains.
    allow_hosts: tuple[str, ...] = ()
    #: Call link-local and cloud metadata addresses too (refused by default).
    allow_link_local: bool = False
    max_redirects: int = 3
    #: The bulkhead: requests in flight per target host and port (as many more may wait for
    #: up to ``bulkhead_wait_s``; beyond that, attempts are refused and retried).
    max_per_host: int = 8
    bulkhead_wait_s: float = 1.0
    #: Consecutive retryable failures that open a host's circuit, and how long it stays open.
    breaker_failures: int = 5
    breaker_cooldown_s: float = 10.0
    #: Bytes of the response body kept in the attempt's output.
    body_limit: int = 4096
    #: A CA bundle to verify targets' certificates with (None: the system's).
    ca_file: str | None = None
    connect_timeout_s: float = 10.0


class RefusedAddress(OSError):
    """Every address a target's name resolved to is one the worker does not call."""


class _GuardedResolver(AbstractResolver):
    """The default resolver, minus the addresses :func:`blocked_reason` refuses."""

    def __init__(self) -> None:
        self._inner = ThreadedResolver()

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        found = await self._inner.resolve(host, port, family)
        kept = [r for r in found if not blocked_reason(r["host"])]
        if not kept and found:
            why = blocked_reason(found[0]["host"])
            raise RefusedAddress(f"{host.rstrip('.')} resolves to {why}")
        return kept

    async def close(self) -> None:
        await self._inner.close()


@dataclass(frozen=True, slots=True)
class _Answer:
    """The final HTTP answer of an attempt (after redirects)."""

    status: int
    reason: str
    url: URL
    redirects: int
    body: bytes
    truncated: bool
    retry_after: int


class _Refused(Exception):
    """A target (or a redirect's) that may not be called: a permanent failure."""


class HttpExecutor:
    """Runs attempts of ``http`` jobs: an :class:`~schedd.worker._executor.Executor`."""

    def __init__(self, config: HttpConfig | None = None) -> None:
        self.config = config or HttpConfig()
        self.breakers = CircuitBreakers(
            self.config.breaker_failures, self.config.breaker_cooldown_s, time.monotonic
        )
        self.bulkheads = Bulkheads(self.config.max_per_host, self.config.bulkhead_wait_s)
        self._session: aiohttp.ClientSession | None = None
        #: Requests sent (every hop of a redirect counts), for tests and metrics.
        self.requests_sent = 0

    # -- the Executor contract ----------------------------------------------------------

    def begin(self, ctx: Context, payload: Any, runtime: Runtime) -> Outcome | asyncio.Future[Any]:
        try:
            target = job_pb2.Job.FromString(ctx.target).http
        except Exception as e:  # protobuf's DecodeError, whose module path varies
            return _permanent(f"http: corrupt target: {e}")
        try:
            url = self._checked(URL(target.url))
        except (_Refused, ValueError) as e:
            return _permanent(f"http: {e}")
        key = _host_key(url)
        if not self.breakers.allow(key):
            wait_s = self.breakers.retry_in(key)
            return Outcome(
                worker_pb2.OUTCOME_FAILED,
                error=f"http: circuit open for {key} after repeated failures: not sent "
                f"(next try in {wait_s:.1f}s)",
                retry_after_ms=max(1, math.ceil(wait_s * 1000)),
            )
        entered = self.bulkheads.try_enter(key)
        if not entered and not self.bulkheads.may_wait(key):
            self.breakers.abandon(key)
            return self._bulkhead_full(key)
        return runtime.loop.create_task(self._attempt(ctx, target, url, key, entered))

    def _bulkhead_full(self, key: str) -> Outcome:
        return Outcome(
            worker_pb2.OUTCOME_FAILED,
            error=f"http: {self.bulkheads.limit} requests to {key} in flight and as many "
            "waiting (the worker's per-host limit): not sent",
        )

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    # -- one attempt --------------------------------------------------------------------

    async def _attempt(
        self, ctx: Context, target: job_pb2.HttpTarget, url: URL, key: str, entered: bool
    ) -> Outcome:
        if not entered:
            try:
                entered = await self.bulkheads.enter(key)
            finally:
                if not entered:
                    self.breakers.abandon(key)
            if not entered:
                return self._bulkhead_full(key)
        started = time.monotonic()
        try:
            outcome = await self._request(ctx, target, url, key, started)
        except asyncio.CancelledError:
            # The deadline passed (a failure of the host: too slow) or the attempt was
            # cancelled (no word on the host: a trial goes back).
            if ctx.deadline_ms and time.time() * 1000 >= ctx.deadline_ms:
                self.breakers.failure(key)
            else:
                self.breakers.abandon(key)
            raise
        finally:
            self.bulkheads.leave(key)
        return outcome

    async def _request(
        self, ctx: Context, target: job_pb2.HttpTarget, url: URL, key: str, started: float
    ) -> Outcome:
        method = (target.method or "POST").upper()
        try:
            a = await self._follow(method, url, self._headers(ctx, target), ctx.raw_payload, target)
        except (_Refused, aiohttp.ClientError, TimeoutError, OSError) as e:
            return self._transport_failure(e, key, url, method)
        output = _output(a.status, started, a.url, a.redirects, a.body, a.truncated)
        verdict = classify_status(a.status, target.success_codes)
        if verdict is Verdict.SUCCESS:
            self.breakers.success(key)
            return Outcome(worker_pb2.OUTCOME_SUCCEEDED, output=output)
        text = f"HTTP {a.status}{' ' + a.reason if a.reason else ''} from {key}"
        if verdict is Verdict.RETRY:
            self.breakers.failure(key)
            return Outcome(
                worker_pb2.OUTCOME_FAILED, output=output, error=text, retry_after_ms=a.retry_after
            )
        self.breakers.neutral(key)
        return Outcome(worker_pb2.OUTCOME_FAILED_PERMANENT, output=output, error=text)

    async def _follow(
        self,
        method: str,
        url: URL,
        headers: dict[str, str],
        payload: bytes,
        target: job_pb2.HttpTarget,
    ) -> _Answer:
        """Sends the request, following redirects (each hop checked); the final answer."""
        session = self._session_now()
        body: bytes | None = payload or None
        redirects = 0
        while True:
            self.requests_sent += 1
            async with session.request(
                method, url, headers=headers, data=body, allow_redirects=False
            ) as resp:
                status = resp.status
                location = resp.headers.get("Location")
                if status not in _REDIRECTS or not location or status in target.success_codes:
                    data, truncated = await _read_limited(resp, self.config.body_limit)
                    retry_after = parse_retry_after(
                        resp.headers.get("Retry-After"), int(time.time() * 1000)
                    )
                    return _Answer(
                        status, resp.reason or "", url, redirects, data, truncated, retry_after
                    )
            if redirects >= self.config.max_redirects:
                raise _Refused(
                    f"more than {self.config.max_redirects} redirects (the last to {location})"
                )
            nxt = self._checked(url.join(URL(location)))
            if _host_key(nxt) != _host_key(url):
                for h in [h for h in headers if h.lower() in _PRIVATE_HEADERS]:
                    del headers[h]
            if status == 303 or (status in (301, 302) and method == "POST"):
                method, body = "GET", None
            url, redirects = nxt, redirects + 1

    def _transport_failure(self, e: BaseException, key: str, url: URL, method: str) -> Outcome:
        """The outcome of a request that got no HTTP answer, and what it says of the host."""
        if isinstance(e, _Refused):
            self.breakers.neutral(key)
            return _permanent(f"http: {e}")
        if isinstance(e, aiohttp.ClientConnectorDNSError) and isinstance(
            e.os_error, RefusedAddress
        ):
            self.breakers.neutral(key)
            return _permanent(f"http: refused: {e.os_error}")
        if isinstance(e, aiohttp.ClientConnectorCertificateError):
            self.breakers.neutral(key)
            return _permanent(f"http: TLS certificate of {key} not accepted: {e.certificate_error}")
        self.breakers.failure(key)
        if isinstance(e, aiohttp.ClientConnectorDNSError):
            return _failed(f"http: cannot resolve {url.host}: {e.os_error}")
        return _failed(f"http: {method} {key} failed: {error_text(e)}")

    # -- helpers ------------------------------------------------------------------------

    def _checked(self, url: URL) -> URL:
        """``url`` if it may be called, else :class:`_Refused` saying why."""
        if url.scheme not in ("http", "https"):
            raise _Refused(f"URL scheme must be http or https, not {url.scheme or 'none'!r}")
        host = url.host
        if not host:
            raise _Refused(f"URL {url} has no host")
        if not host_allowed(host, self.config.allow_hosts):
            raise _Refused(f"host {host} is not in the worker's --http-allow list")
        if not self.config.allow_link_local:
            why = blocked_reason(host)
            if why:
                raise _Refused(f"refused: {why} (--http-allow-link-local to call it)")
        return url

    def _headers(self, ctx: Context, target: job_pb2.HttpTarget) -> dict[str, str]:
        headers = dict(target.headers)
        if ctx.raw_payload and not any(h.lower() == "content-type" for h in headers):
            headers["Content-Type"] = _content_type(ctx.raw_payload)
        if not any(h.lower() == "user-agent" for h in headers):
            headers["User-Agent"] = f"schedd/{schedd.__version__}"
        ours = {
            "Idempotency-Key": ctx.execution_id,
            "X-Schedd-Execution-Id": ctx.execution_id,
            "X-Schedd-Fencing-Token": str(ctx.fencing_token),
            "X-Schedd-Attempt": str(ctx.attempt),
            "X-Schedd-Scheduled-At": _rfc3339(ctx.scheduled_ms),
            "X-Schedd-Job-Id": ctx.job_id,
            "X-Schedd-Tenant": ctx.tenant,
        }
        lowered = {k.lower() for k in ours}
        headers = {k: v for k, v in headers.items() if k.lower() not in lowered}
        headers.update(ours)
        return headers

    def _session_now(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            verify: ssl.SSLContext | bool = True
            if self.config.ca_file:
                verify = ssl.create_default_context(cafile=self.config.ca_file)
            resolver = None if self.config.allow_link_local else _GuardedResolver()
            connector = aiohttp.TCPConnector(resolver=resolver, limit=0, ssl=verify)
            self._session = aiohttp.ClientSession(
                connector=connector,
                timeout=aiohttp.ClientTimeout(
                    total=None, sock_connect=self.config.connect_timeout_s
                ),
                cookie_jar=aiohttp.DummyCookieJar(),
                trust_env=False,
            )
        return self._session


def _host_key(url: URL) -> str:
    host = (url.host or "").lower()
    if ":" in host:
        host = f"[{host}]"
    return f"{host}:{url.port}"


async def _read_limited(resp: aiohttp.ClientResponse, limit: int) -> tuple[bytes, bool]:
    """At most ``limit`` bytes of the body, and whether there was more (never reads it all)."""
    buf = bytearray()
    while len(buf) <= limit:
        chunk = await resp.content.read(limit + 1 - len(buf))
        if not chunk:
            break
        buf += chunk
    return bytes(buf[:limit]), len(buf) > limit


def _output(
    status: int, started: float, url: URL, redirects: int, data: bytes, truncated: bool
) -> bytes:
    doc = {
        "status": status,
        "duration_ms": round((time.monotonic() - started) * 1000),
        "url": str(url),
        "redirects": redirects,
        "body": data.decode("utf-8", "replace"),
        "truncated": truncated,
    }
    return json.dumps(doc, separators=(",", ":")).encode()


def _content_type(payload: bytes) -> str:
    try:
        json.loads(payload)
    except ValueError:
        return "application/octet-stream"
    return "application/json"


def _rfc3339(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=UTC).isoformat(timespec="milliseconds")


def _permanent(error: str) -> Outcome:
    return Outcome(worker_pb2.OUTCOME_FAILED_PERMANENT, error=error)


def _failed(error: str) -> Outcome:
    return Outcome(worker_pb2.OUTCOME_FAILED, error=error)

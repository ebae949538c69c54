"""The pure rules of HTTP jobs: which answers are retried, Retry-After, which targets may be
called, and the per-host circuit breaker and bulkhead. No I/O: the clock is injected.

* **Answers.** A success code (2xx, plus the job's ``success_codes``) succeeds; 5xx, 408 and
  429 are retryable failures (with the job's backoff, or the target's ``Retry-After`` when it
  is longer); every other code fails permanently (no retry, straight to the dead letters).
* **Targets.** Only ``http`` and ``https`` URLs with a host. Addresses that are never a
  webhook's are refused unless the worker allows them: link-local (169.254.0.0/16, which
  holds the clouds' metadata service at 169.254.169.254, and fe80::/10), the other known
  metadata addresses (fd00:ec2::254, 100.100.100.200), unspecified (0.0.0.0, ::) and
  multicast. With an allow-list, only the listed hosts are called (``example.com`` matches
  that host only, ``*.example.com`` its subdomains).
* **Circuit breaker** (per target host and port, per worker): closed, it counts consecutive
  retryable failures; at ``failures`` it opens for ``cooldown_s``, and attempts for the host
  are refused without a request; then it lets exactly one trial through (half-open): a
  success closes it, a failure opens it for another cool-down.
* **Bulkhead** (per target host and port): at most ``limit`` requests in flight and at most
  ``limit`` attempts waiting for one of those places, each for at most ``max_wait_s``; an
  attempt beyond that is refused (a retryable failure). A slow host so holds at most
  twice ``limit`` of the worker's slots and the other hosts keep theirs, while a burst to a
  host that answers quickly passes through the queue.
"""

from __future__ import annotations

import asyncio
import enum
import ipaddress
import math
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from email.utils import parsedate_to_datetime

#: Addresses the metadata services of cloud providers answer on, outside link-local.
_METADATA = frozenset(
    {
        ipaddress.ip_address("fd00:ec2::254"),  # AWS (IPv6)
        ipaddress.ip_address("100.100.100.200"),  # Alibaba Cloud
    }
)


def blocked_reason(address: str) -> str:
    """Why an IP address may not be called by default ("" when it may)."""
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])  # an IPv6 scope id is not ours
    except ValueError:
        return ""
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    if ip in _METADATA or ip == ipaddress.ip_address("169.254.169.254"):
        return f"{ip} is a cloud metadata address"
    if ip.is_link_local:
        return f"{ip} is link-local"
    if ip.is_unspecified:
        return f"{ip} is unspecified"
    if ip.is_multicast:
        return f"{ip} is multicast"
    return ""


def host_allowed(host: str, allow: Iterable[str]) -> bool:
    """Whether ``host`` is on the allow-list (an empty list allows every host).

    ``example.com`` matches that host exactly; ``*.example.com`` matches any subdomain of
    it (not the bare domain); case and a trailing dot are ignored.
    """
    patterns = [p.strip().lower().rstrip(".") for p in allow if p.strip()]
    if not patterns:
        return True
    h = host.lower().rstrip(".").strip("[]")
    for pattern in patterns:
        p = pattern.strip("[]")
        if p.startswith("*."):
            if h.endswith(p[1:]) and len(h) > len(p) - 1:
                return True
        elif h == p:
            return True
    return False


class Verdict(enum.Enum):
    SUCCESS = "success"
    RETRY = "retry"
    PERMANENT = "permanent"


def classify_status(status: int, success_codes: Iterable[int] = ()) -> Verdict:
    """What an HTTP status means for the attempt (see the module docstring)."""
    if 200 <= status < 300 or status in set(success_codes):
        return Verdict.SUCCESS
    if status >= 500 or status in (408, 429):
        return Verdict.RETRY
    return Verdict.PERMANENT


#: The longest Retry-After honoured from a target (the node caps it at the job's max backoff
#: too): a target cannot park an execution for days.
RETRY_AFTER_CAP_MS = 3_600_000


def parse_retry_after(value: str | None, now_ms: int) -> int:
    """A ``Retry-After`` header as milliseconds from ``now_ms`` (0: absent or unreadable).

    Either delay-seconds (``120``) or an HTTP date; capped at :data:`RETRY_AFTER_CAP_MS`.
    """
    if not value:
        return 0
    value = value.strip()
    if value.isdigit():
        return min(int(value) * 1000, RETRY_AFTER_CAP_MS)
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return 0
    if when.tzinfo is None:
        return 0
    delta = math.ceil(when.timestamp() * 1000) - now_ms
    return max(0, min(delta, RETRY_AFTER_CAP_MS))


class BreakerState(enum.Enum):
    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half-open"


@dataclass(slots=True)
class _Circuit:
    state: BreakerState = BreakerState.CLOSED
    failures: int = 0
    opened_at: float = 0.0
    trial_out: bool = False
    opens: int = 0


class CircuitBreakers:
    """One circuit per target (``host:port``); see the module docstring.

    Use: ``allow(key)`` before a request (False: refuse the attempt, ``retry_in(key)`` says
    for how long); then exactly one of ``success(key)`` / ``failure(key)`` / ``neutral(key)``
    for every allowed request (neutral: a permanent answer, which says nothing of the host's
    health but ends a half-open trial as a success would: the host answered).
    """

    def __init__(self, failures: int, cooldown_s: float, clock: Callable[[], float]) -> None:
        if failures < 1:
            raise ValueError("breaker failures must be at least 1")
        if cooldown_s <= 0:
            raise ValueError("breaker cool-down must be positive")
        self.failures = failures
        self.cooldown_s = cooldown_s
        self._clock = clock
        self._circuits: dict[str, _Circuit] = {}

    def state(self, key: str) -> BreakerState:
        c = self._circuits.get(key)
        if c is None:
            return BreakerState.CLOSED
        if c.state is BreakerState.OPEN and self._clock() - c.opened_at >= self.cooldown_s:
            return BreakerState.HALF_OPEN
        return c.state

    def allow(self, key: str) -> bool:
        """Whether a request to ``key`` may go now (a half-open circuit lets one through)."""
        c = self._circuits.get(key)
        if c is None or c.state is BreakerState.CLOSED:
            return True
        if c.state is BreakerState.OPEN:
            if self._clock() - c.opened_at < self.cooldown_s:
                return False
            c.state = BreakerState.HALF_OPEN
            c.trial_out = False
        if c.trial_out:  # half-open, its one trial still out
            return False
        c.trial_out = True
        return True

    def retry_in(self, key: str) -> float:
        """Seconds until a refused request could be tried (the rest of the cool-down)."""
        c = self._circuits.get(key)
        if c is None or c.state is BreakerState.CLOSED:
            return 0.0
        if c.state is BreakerState.HALF_OPEN:  # a trial is out: its answer decides
            return self.cooldown_s
        return max(0.0, self.cooldown_s - (self._clock() - c.opened_at))

    def success(self, key: str) -> None:
        c = self._circuits.get(key)
        if c is not None:
            c.state, c.failures, c.trial_out = BreakerState.CLOSED, 0, False

    def neutral(self, key: str) -> None:
        c = self._circuits.get(key)
        if c is not None and c.state is BreakerState.HALF_OPEN:
            self.success(key)

    def abandon(self, key: str) -> None:
        """An allowed request ended without an answer that says anything (cancelled): a
        half-open circuit may send another trial."""
        c = self._circuits.get(key)
        if c is not None and c.state is BreakerState.HALF_OPEN:
            c.trial_out = False

    def failure(self, key: str) -> None:
        c = self._circuits.setdefault(key, _Circuit())
        if c.state is BreakerState.HALF_OPEN:
            self._open(c)
            return
        if c.state is BreakerState.OPEN:  # a request sent before it opened came back
            return
        c.failures += 1
        if c.failures >= self.failures:
            self._open(c)

    def opened(self, key: str) -> int:
        """How many times the circuit of ``key`` opened."""
        c = self._circuits.get(key)
        return 0 if c is None else c.opens

    def _open(self, c: _Circuit) -> None:
        c.state, c.opened_at, c.trial_out = BreakerState.OPEN, self._clock(), False
        c.opens += 1


class Bulkheads:
    """At most ``limit`` requests in flight per target (``host:port``), and at most ``limit``
    more waiting for one of them, each for at most ``max_wait_s`` (then refused)."""

    def __init__(self, limit: int, max_wait_s: float = 1.0) -> None:
        if limit < 1:
            raise ValueError("the per-host limit must be at least 1")
        self.limit = limit
        self.max_wait_s = max_wait_s
        self._in_flight: dict[str, int] = {}
        self._waiters: dict[str, deque[asyncio.Future[None]]] = {}

    def try_enter(self, key: str) -> bool:
        """Takes a place now if one is free (never waits)."""
        n = self._in_flight.get(key, 0)
        if n >= self.limit:
            return False
        self._in_flight[key] = n + 1
        return True

    def may_wait(self, key: str) -> bool:
        """Whether an attempt may queue for ``key`` (fewer than ``limit`` wait already)."""
        q = self._waiters.get(key)
        return q is None or sum(1 for f in q if not f.done()) < self.limit

    async def enter(self, key: str) -> bool:
        """Takes a place, waiting in turn for up to ``max_wait_s``; False: none came free.

        A place handed over as the wait ends is kept (True); one handed to a waiter that is
        cancelled goes on to the next.
        """
        if self.try_enter(key):
            return True
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.setdefault(key, deque()).append(fut)
        try:
            async with asyncio.timeout(self.max_wait_s):
                await fut
        except TimeoutError:
            return fut.done() and not fut.cancelled()
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled():
                self.leave(key)
            raise
        finally:
            self._tidy(key)
        return True

    def leave(self, key: str) -> None:
        """Gives a place back: to the first live waiter, else free."""
        q = self._waiters.get(key)
        while q:
            f = q.popleft()
            if not f.done():
                f.set_result(None)
                return
        n = self._in_flight.get(key, 0) - 1
        if n > 0:
            self._in_flight[key] = n
        else:
            self._in_flight.pop(key, None)

    def in_flight(self, key: str) -> int:
        return self._in_flight.get(key, 0)

    def _tidy(self, key: str) -> None:
        q = self._waiters.get(key)
        if q is not None:
            while q and q[0].done():
                q.popleft()
            if not q:
                del self._waiters[key]

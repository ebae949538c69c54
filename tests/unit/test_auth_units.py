"""The pure parts of auth: bearer strings, token checks, roles and scopes, API quotas, and the
dispatch queue's per-tenant pop for workers whose token is limited to tenants (fake clock)."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from schedd import InvalidArgument, JobNotFound, PermissionDenied, ResourceExhausted
from schedd._clock import ManualClock
from schedd._errors import Unauthenticated
from schedd.auth import (
    ANONYMOUS,
    ApiQuotas,
    Caller,
    TokenRegistry,
    acting_as,
    current,
    hash_secret,
    split_bearer,
    validate_new_token,
    worker_scope,
)
from schedd.dispatch._pending import PendingDispatches, Route
from schedd.store._types import KeyValue
from schedd.v1 import auth_pb2, scheduler_pb2, worker_pb2


def _token(token_id: str, secret: str, **kw: object) -> auth_pb2.ApiToken:
    return auth_pb2.ApiToken(id=token_id, secret_hash=hash_secret(secret), **kw)  # type: ignore[arg-type]


def _kv(token: auth_pb2.ApiToken) -> KeyValue:
    return KeyValue(b"k/" + token.id.encode(), token.SerializeToString(), 1, 1, 1, 0)


def test_bearer_strings_split_or_are_refused() -> None:
    assert split_bearer("sdt_abc_s3cr_et") == ("abc", "s3cr_et")
    assert split_bearer("Bearer sdt_abc_x") == ("abc", "x")
    for bad in ("", "abc", "sdt_", "sdt_abc", "sdt__x", "Bearer xyz"):
        with pytest.raises(Unauthenticated, match="malformed"):
            split_bearer(bad)


async def test_registry_checks_secret_revocation_expiry_and_asks_etcd_once_per_miss() -> None:
    clock = ManualClock(1_000_000)
    asked: list[str] = []
    late = _token("late", "s3", role="viewer", tenant="t")

    async def fetch(token_id: str) -> auth_pb2.ApiToken | None:
        asked.append(token_id)
        return late if token_id == "late" else None

    reg = TokenRegistry(clock.now_ms, fetch)
    ok = _token("ok", "s1", role="editor", tenant="acme")
    gone = _token("gone", "s2", role="admin", revoked_ms=5)
    old = _token("old", "s4", role="viewer", tenant="t", expires_ms=999_999)
    reg.replace([_kv(ok), _kv(gone), _kv(old)])
    caller = await reg.authenticate("Bearer sdt_ok_s1", peer="ipv4:1.2.3.4:5")
    assert (caller.actor, caller.role, caller.tenant, caller.peer) == (
        "ok", "editor", "acme", "ipv4:1.2.3.4:5"
    )  # fmt: skip
    with pytest.raises(Unauthenticated, match="not valid"):
        await reg.authenticate("sdt_ok_wrong")
    with pytest.raises(Unauthenticated, match="revoked"):
        await reg.authenticate("sdt_gone_s2")
    with pytest.raises(Unauthenticated, match="expired"):
        await reg.authenticate("sdt_old_s4")
    with pytest.raises(Unauthenticated, match="no credentials"):
        await reg.authenticate(None)
    # A token the mirror has not heard of is read once; unknown ids are remembered a while.
    assert (await reg.authenticate("sdt_late_s3")).actor == "late"
    await reg.authenticate("sdt_late_s3")
    for _ in range(3):
        with pytest.raises(Unauthenticated):
            await reg.authenticate("sdt_nope_x")
    assert asked == ["late", "nope"]
    clock.advance(2.0)
    with pytest.raises(Unauthenticated):
        await reg.authenticate("sdt_nope_x")
    assert asked == ["late", "nope", "nope"]
    assert reg.refused("gone") and reg.refused("old") and reg.refused("missing")
    assert not reg.refused("ok")


def test_new_tokens_are_checked_field_by_field() -> None:
    cases = [
        (auth_pb2.ApiToken(role="root"), "token.role"),
        (auth_pb2.ApiToken(role="admin", tenant="a"), "token.tenant"),
        (auth_pb2.ApiToken(role="editor"), "token.tenant"),
        (auth_pb2.ApiToken(role="viewer", tenant="a", queues=["q"]), "token.queues"),
        (auth_pb2.ApiToken(role="worker", tenant="a"), "token.tenant"),
        (auth_pb2.ApiToken(role="worker", queues=[""]), "token.queues[0]"),
        (auth_pb2.ApiToken(role="viewer", tenant="a", description="x" * 300), "token.description"),
    ]
    for token, field in cases:
        with pytest.raises(InvalidArgument) as err:
            validate_new_token(token, 0)
        assert err.value.field == field
    with pytest.raises(InvalidArgument, match="ttl_ms"):
        validate_new_token(auth_pb2.ApiToken(role="admin"), -1)
    ok = validate_new_token(auth_pb2.ApiToken(role="worker", queues=["q"], tenants=["t"]), 0)
    assert list(ok.queues) == ["q"] and list(ok.tenants) == ["t"]


def test_roles_and_scopes() -> None:
    editor = Caller("e", "editor", "acme")
    viewer = Caller("v", "viewer", "acme")
    worker = Caller("w", "worker", queues=frozenset({"q"}), tenants=frozenset({"acme"}))
    assert editor.scope("tenant", "") == "acme" and editor.scope("tenant", "acme") == "acme"
    with pytest.raises(PermissionDenied, match="tenant: token e acts for tenant 'acme'"):
        editor.scope("tenant", "bolt")
    assert ANONYMOUS.scope("tenant", "") == "" and ANONYMOUS.scope("tenant", "x") == "x"
    with pytest.raises(JobNotFound):
        editor.check_job("j1", "bolt")
    with pytest.raises(PermissionDenied, match="viewer"):
        viewer.require_writer("acme")
    with pytest.raises(PermissionDenied, match="worker token"):
        worker.require_api()
    with pytest.raises(PermissionDenied, match="admin"):
        editor.require_admin("making tokens")
    assert worker_scope(worker, ["q"]) == frozenset({"acme"})
    with pytest.raises(PermissionDenied, match=r"hello\.queues"):
        worker_scope(worker, ["q", "other"])
    with pytest.raises(PermissionDenied, match="workers need a worker token"):
        worker_scope(editor, ["q"])
    assert worker_scope(ANONYMOUS, ["any"]) is None


def test_the_caller_is_set_per_call_and_never_defaults_to_admin_with_auth_on() -> None:
    assert current(False) is ANONYMOUS
    with pytest.raises(Unauthenticated):
        current(True)
    who = Caller("e", "editor", "acme")
    with acting_as(who):
        assert current(True) is who
    with pytest.raises(Unauthenticated):
        current(True)


async def test_caller_does_not_leak_between_concurrent_calls() -> None:
    seen: list[tuple[str, str]] = []

    async def call(name: str) -> None:
        with acting_as(Caller(name, "viewer", name)):
            await asyncio.sleep(0)
            seen.append((name, current(True).actor))

    await asyncio.gather(*(call(f"t{n}") for n in range(20)))
    assert all(a == b for a, b in seen) and len(seen) == 20


@settings(max_examples=60, deadline=None)
@given(
    rate=st.floats(min_value=0.5, max_value=200),
    burst=st.integers(min_value=1, max_value=50),
    gaps=st.lists(st.integers(min_value=0, max_value=400), min_size=1, max_size=300),
)
def test_api_quota_never_admits_more_than_burst_plus_rate_times_time(
    rate: float, burst: int, gaps: list[int]
) -> None:
    clock = ManualClock(10_000)
    limits = scheduler_pb2.TenantLimits(tenant="t", api_rate=rate, api_burst=burst)
    quotas = ApiQuotas(lambda t: limits if t == "t" else None, clock.now_ms)
    admitted: list[int] = []
    for gap in gaps:
        clock.advance(gap / 1000)
        try:
            quotas.charge("t")
            admitted.append(clock.now_ms())
        except ResourceExhausted as exc:
            assert exc.retry_after_s > 0
        quotas.charge("other")  # no limits: never refused
    for i, start in enumerate(admitted):
        for j in range(i, len(admitted)):
            span = admitted[j] - start
            assert j - i + 1 <= burst + rate * span / 1000 + 1e-6


def test_a_tenant_limited_worker_pops_only_its_tenants_and_others_keep_their_turn() -> None:
    pending = PendingDispatches()
    route = Route("default", "handler", "h")
    for n, tenant in enumerate(["a", "b", "a", "c", "b"]):
        pending.add(
            worker_pb2.Dispatch(execution_id=f"e{n}", tenant=tenant, queue="default", handler="h")
        )
    only_b = frozenset({"b"})
    assert [pending.pop(route, only_b).execution_id for _ in range(2)] == ["e1", "e4"]  # type: ignore[union-attr]
    assert pending.pop(route, only_b) is None
    assert pending.pop(route, frozenset({"zzz"})) is None
    rest = [pending.pop(route) for _ in range(3)]
    assert [d.execution_id for d in rest if d] == ["e0", "e3", "e2"]
    assert pending.pop(route) is None and len(pending) == 0

"""Job ids are scoped by tenant: the rule (``model.scoped_job_id``) is pure string work, so
a create's answer never depends on what another tenant has stored."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from schedd import InvalidArgument
from schedd.model import (
    check_tenant,
    id_namespace,
    is_generated_id,
    new_job_id,
    scoped_job_id,
    validate_new_job,
)
from schedd.v1 import job_pb2

NOW = 1_700_000_000_000


def _spec(**kw: str) -> job_pb2.Job:
    return job_pb2.Job(
        name="n",
        schedule=job_pb2.Schedule(expr="@every 1h"),
        handler=job_pb2.HandlerTarget(name="noop"),
        **kw,
    )


def test_a_tenants_chosen_id_is_prefixed_with_the_tenant() -> None:
    assert scoped_job_id("acme", "nightly") == "acme:nightly"
    assert scoped_job_id("acme", "acme:nightly") == "acme:nightly"  # given prefixed: kept
    assert scoped_job_id("acme", "billing:nightly") != scoped_job_id("bolt", "billing:nightly")


def test_the_default_tenants_chosen_ids_keep_no_prefix() -> None:
    assert scoped_job_id("default", "nightly") == "nightly"
    assert scoped_job_id("default", "default:nightly") == "nightly"
    for squat in ("acme:x", "default:acme:x"):
        with pytest.raises(InvalidArgument, match=f"job.id: '{squat}': ids with ':' are other"):
            scoped_job_id("default", squat)
    with pytest.raises(InvalidArgument, match="generated"):
        scoped_job_id("default", new_job_id())


def test_another_tenants_namespace_is_only_a_prefix_of_ones_own() -> None:
    assert scoped_job_id("bolt", "acme:x") == "bolt:acme:x"


def test_generated_ids_are_never_prefixed_and_a_chosen_lookalike_is() -> None:
    generated = new_job_id()
    assert is_generated_id(generated) and id_namespace(generated) is None
    job = validate_new_job(_spec(tenant="acme"), now_ms=NOW, id_factory=lambda: generated)
    assert job.id == generated
    chosen = validate_new_job(_spec(tenant="acme", id=generated), now_ms=NOW, id_factory=str)
    assert chosen.id == f"acme:{generated}"  # cannot squat another tenant's generated id


def test_tenant_names_may_not_contain_the_separator() -> None:
    with pytest.raises(InvalidArgument, match=r"job\.tenant: must not contain ':'"):
        validate_new_job(_spec(tenant="a:b"), now_ms=NOW, id_factory=new_job_id)
    with pytest.raises(InvalidArgument, match=r"token\.tenant"):
        check_tenant("token.tenant", "x:y")


_TEXT = st.text(st.characters(blacklist_categories=("Cc", "Cs"), blacklist_characters="/"))
_TENANT = _TEXT.filter(lambda t: ":" not in t and t.strip() == t and t != "")


@given(_TENANT | st.just("default"), _TENANT, _TEXT.filter(lambda t: t.strip() == t and t != ""))
def test_two_tenants_never_share_an_id(a: str, b: str, chosen: str) -> None:
    """Whatever two different tenants choose, their ids differ, and each id's namespace is
    its tenant's (or none, for the default tenant)."""
    ids: dict[str, str] = {}
    for tenant in (a, b):
        try:
            ids[tenant] = scoped_job_id(tenant, chosen)
        except InvalidArgument:
            continue
        owner = id_namespace(ids[tenant])
        assert owner == (None if tenant == "default" else tenant)
    if a != b and a in ids and b in ids:
        assert ids[a] != ids[b]

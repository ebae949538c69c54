"""schedd.model: every validation rule names its field; normalisation; updates; same_spec."""

from __future__ import annotations

import re
import sys
import types
from collections.abc import Iterator
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import pytest

from schedd import InvalidArgument, InvalidSchedule
from schedd.model import (
    apply_update,
    new_job_id,
    parse_misfire,
    parse_overlap,
    parse_state,
    same_spec,
    state_name,
    validate_execution_id,
    validate_id,
    validate_new_job,
)
from schedd.v1 import execution_pb2, job_pb2

NOW = 1_772_953_200_000


def _fake_schedule() -> types.ModuleType:
    """A stand-in for schedd.schedule when it is not importable yet (only rejects 'bad')."""
    mod = types.ModuleType("schedd.schedule")

    def validate_timezone(tz: str) -> str:
        try:
            ZoneInfo(tz)
        except (ZoneInfoNotFoundError, ValueError) as exc:
            raise InvalidSchedule(f"unknown time zone {tz!r}", "schedule.timezone") from exc
        return tz

    def parse_schedule(expr: str, tz: str = "UTC", *, anchor_ms: int = 0) -> object:
        validate_timezone(tz)
        if "bad" in expr:
            raise InvalidSchedule(f"cannot parse {expr!r}")
        return object()

    mod.validate_timezone = validate_timezone  # type: ignore[attr-defined]
    mod.parse_schedule = parse_schedule  # type: ignore[attr-defined]
    return mod


@pytest.fixture(autouse=True)
def schedule_module(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    try:
        import schedd.schedule  # noqa: F401
    except ImportError:
        monkeypatch.setitem(sys.modules, "schedd.schedule", _fake_schedule())
    yield


def _job(**kw: object) -> job_pb2.Job:
    job = job_pb2.Job(name="report")
    job.schedule.expr = "0 9 * * *"
    job.handler.name = "send_report"
    for key, value in kw.items():
        setattr(job, key, value)
    return job


def _new(job: job_pb2.Job) -> job_pb2.Job:
    return validate_new_job(job, now_ms=NOW, id_factory=lambda: "j-generated")


def _field_of(job: job_pb2.Job) -> str:
    with pytest.raises(InvalidArgument) as info:
        _new(job)
    return info.value.field


def test_defaults_are_filled_in_on_a_copy() -> None:
    given = _job(version=9, next_fire_ms=5, partition=3, created_ms=1)
    job = _new(given)
    assert given.id == "" and given.version == 9  # the input is untouched
    assert job.id == "j-generated"
    assert (job.tenant, job.handler.queue, job.schedule.timezone) == ("default", "default", "UTC")
    assert (job.created_ms, job.updated_ms) == (NOW, NOW)
    assert (job.version, job.next_fire_ms, job.partition, job.last_fire_ms) == (0, 0, 0, 0)
    assert job.retry.max_attempts == 3
    assert job.retry.initial_backoff_ms == 1_000
    assert job.retry.max_backoff_ms == 300_000
    assert job.retry.multiplier == 2.0
    assert job.misfire.mode == job_pb2.MISFIRE_ONCE
    assert job.misfire.catch_up_limit == 10
    assert job.overlap == job_pb2.OVERLAP_ALLOW
    assert job.timeout_ms == 300_000


def test_given_values_are_kept_and_nfc_normalised() -> None:
    job = _new(_job(id="my-job", tenant="acme", name="Cafe\u0301", timeout_ms=30_000))
    assert (job.id, job.tenant, job.timeout_ms) == ("acme:my-job", "acme", 30_000)
    assert job.name == "Caf\u00e9"


def test_new_job_id_shape() -> None:
    ids = {new_job_id() for _ in range(50)}
    assert len(ids) == 50
    for job_id in ids:
        assert job_id.startswith("j-") and len(job_id) == 22
        assert job_id[2:].isalnum() and job_id == job_id.lower()


def test_new_job_ids_stay_fresh_and_base32_across_their_blocks() -> None:
    ids = [new_job_id() for _ in range(3 * 256 + 7)]  # ids are encoded 256 at a time
    assert len(set(ids)) == len(ids)
    assert all(re.fullmatch(r"j-[a-z2-7]{20}", i) for i in ids)


@pytest.mark.parametrize(
    ("mutate", "field"),
    [
        (lambda j: setattr(j, "name", ""), "job.name"),
        (lambda j: setattr(j, "name", "a/b"), "job.name"),
        (lambda j: setattr(j, "name", "x" * 201), "job.name"),
        (lambda j: setattr(j, "name", "bad\x07bell"), "job.name"),
        (lambda j: setattr(j, "id", "a/b"), "job.id"),
        (lambda j: setattr(j, "tenant", "t\n"), "job.tenant"),
        (lambda j: setattr(j, "idempotency_key", "k" * 300), "job.idempotency_key"),
        (lambda j: j.schedule.ClearField("expr"), "job.schedule.expr"),
        (lambda j: setattr(j.schedule, "expr", "bad cron"), "job.schedule.expr"),
        (lambda j: setattr(j.schedule, "timezone", "Mars/Olympus"), "job.schedule.timezone"),
        (lambda j: j.ClearField("handler"), "job.target"),
        (lambda j: setattr(j.handler, "name", ""), "job.handler.name"),
        (lambda j: setattr(j.handler, "queue", "q/1"), "job.handler.queue"),
        (lambda j: setattr(j.http, "url", "ftp://x"), "job.http.url"),
        (lambda j: setattr(j.http, "url", "http://"), "job.http.url"),
        (lambda j: j.shell.SetInParent(), "job.shell.argv"),
        (lambda j: setattr(j, "payload", b"x" * (256 * 1024 + 1)), "job.payload"),
        (lambda j: setattr(j.retry, "max_attempts", 101), "job.retry.max_attempts"),
        (lambda j: setattr(j.retry, "max_attempts", -1), "job.retry.max_attempts"),
        (lambda j: setattr(j.retry, "initial_backoff_ms", -1), "job.retry.initial_backoff_ms"),
        (lambda j: setattr(j.retry, "max_backoff_ms", -5), "job.retry.max_backoff_ms"),
        (lambda j: setattr(j.retry, "multiplier", 0.5), "job.retry.multiplier"),
        (lambda j: setattr(j, "timeout_ms", -1), "job.timeout_ms"),
        (lambda j: setattr(j, "jitter_ms", -1), "job.jitter_ms"),
        (lambda j: setattr(j.misfire, "catch_up_limit", -1), "job.misfire.catch_up_limit"),
        (
            lambda j: setattr(j.misfire, "starting_deadline_ms", -1),
            "job.misfire.starting_deadline_ms",
        ),
        (lambda j: setattr(j.misfire, "mode", 42), "job.misfire.mode"),
        (lambda j: setattr(j, "overlap", 42), "job.overlap"),
        (lambda j: j.labels.update({"": "v"}), "job.labels.key"),
        (lambda j: j.labels.update({"a/b": "v"}), "job.labels.key"),
        (lambda j: j.labels.update({"k": "v" * 201}), "job.labels[k]"),
    ],
)
def test_each_rule_names_its_field(mutate: object, field: str) -> None:
    job = _job()
    mutate(job)  # type: ignore[operator]
    assert _field_of(job) == field


def test_payload_at_the_limit_is_accepted() -> None:
    assert len(_new(_job(payload=b"x" * 256 * 1024)).payload) == 256 * 1024


def test_http_and_shell_targets() -> None:
    job = _job()
    job.http.url = "https://example.com/hook?x=1"
    out = _new(job)
    assert out.WhichOneof("target") == "http" and out.http.method == "POST"
    job.http.method = "trace"
    assert _field_of(job) == "job.http.method"
    shell = _job()
    shell.shell.argv.extend(["echo", "hi"])
    assert list(_new(shell).shell.argv) == ["echo", "hi"]


def test_validate_id() -> None:
    assert validate_id("id", "j-1") == "j-1"
    for bad in ("", "a/b", "x" * 201, "a\tb"):
        with pytest.raises(InvalidArgument) as info:
            validate_id("id", bad)
        assert info.value.field == "id"
    assert validate_execution_id("id", "j-1@1772953200000") == "j-1@1772953200000"
    with pytest.raises(InvalidArgument):
        validate_execution_id("id", "j-1@later")


def test_apply_update_changes_only_named_paths() -> None:
    stored = _new(_job(payload=b'{"a":1}'))
    stored.version = 7
    patch = job_pb2.Job(name="renamed", payload=b"ignored")
    patch.schedule.timezone = "Europe/Berlin"
    out = apply_update(stored, patch, ["name", "schedule.timezone"], now_ms=NOW + 5)
    assert out.name == "renamed"
    assert out.schedule.expr == "0 9 * * *"
    assert out.schedule.timezone == "Europe/Berlin"
    assert out.payload == b'{"a":1}'
    assert (out.id, out.created_ms, out.updated_ms, out.version) == (
        "j-generated",
        NOW,
        NOW + 5,
        7,
    )
    assert stored.name == "report"


def test_apply_update_target_and_nested_retry() -> None:
    stored = _new(_job())
    patch = job_pb2.Job()
    patch.http.url = "http://hooks.local/x"
    patch.retry.max_attempts = 7
    out = apply_update(stored, patch, ["target", "retry.max_attempts"], now_ms=NOW)
    assert out.WhichOneof("target") == "http"
    assert out.retry.max_attempts == 7
    assert out.retry.initial_backoff_ms == 1_000  # untouched subfields kept
    out2 = apply_update(stored, patch, ["http"], now_ms=NOW)
    assert out2.WhichOneof("target") == "http"


def test_apply_update_labels_replace_and_validation() -> None:
    stored = _new(_job())
    stored.labels["old"] = "1"
    patch = job_pb2.Job()
    patch.labels["new"] = "2"
    assert dict(apply_update(stored, patch, ["labels"], now_ms=NOW).labels) == {"new": "2"}
    bad = job_pb2.Job()
    bad.schedule.expr = "bad"
    with pytest.raises(InvalidArgument) as info:
        apply_update(stored, bad, ["schedule"], now_ms=NOW)
    assert info.value.field == "job.schedule.expr"


@pytest.mark.parametrize(
    "path", ["id", "tenant", "idempotency_key", "created_ms", "version", "bogus", "retry.nope"]
)
def test_apply_update_refuses_immutable_paths(path: str) -> None:
    with pytest.raises(InvalidArgument) as info:
        apply_update(_new(_job()), job_pb2.Job(), [path], now_ms=NOW)
    assert info.value.field == "update_paths"


def test_apply_update_empty_paths_replace_all_mutable() -> None:
    stored = _new(_job())
    patch = _job(name="other")
    out = apply_update(stored, patch, [], now_ms=NOW)
    assert out.name == "other" and out.id == stored.id


def test_apply_update_target_without_one() -> None:
    with pytest.raises(InvalidArgument) as info:
        apply_update(_new(_job()), job_pb2.Job(), ["target"], now_ms=NOW)
    assert info.value.field == "job.target"


def test_same_spec() -> None:
    a = _new(_job())
    b = validate_new_job(_job(), now_ms=NOW + 99, id_factory=lambda: "j-other")
    b.version, b.next_fire_ms, b.paused = 5, 123, True
    assert same_spec(a, b)
    c = _new(_job(payload=b"1"))
    assert not same_spec(a, c)


def test_state_names() -> None:
    assert state_name(execution_pb2.EXECUTION_SUCCEEDED) == "SUCCEEDED"
    assert state_name(execution_pb2.EXECUTION_RETRY_WAIT) == "RETRY_WAIT"
    assert state_name(0) == "UNSPECIFIED"
    assert parse_state("succeeded") == execution_pb2.EXECUTION_SUCCEEDED
    assert parse_state("retry-wait") == execution_pb2.EXECUTION_RETRY_WAIT
    with pytest.raises(InvalidArgument):
        parse_state("exploded")
    assert parse_misfire("catch_up") == job_pb2.MISFIRE_CATCH_UP
    assert parse_overlap("BUFFER_ONE") == job_pb2.OVERLAP_BUFFER_ONE
    with pytest.raises(InvalidArgument) as info:
        parse_overlap("never")
    assert info.value.field == "overlap"

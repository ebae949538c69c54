"""The daemons' log lines (``schedd --log-format text|json``): stdlib records from the library,
with and without ``extra=`` fields, exceptions, structlog loggers, the process's own fields, and
the CLI option."""

from __future__ import annotations

import contextlib
import io
import json
import logging
import re
import sys
import threading
import warnings
from collections.abc import Iterator
from typing import Any

import pytest
import structlog
from click.testing import CliRunner

from schedd import _logfmt
from schedd._logfmt import (
    ProcessFields,
    bind_process,
    configure_logging,
    json_logs,
    make_formatter,
)
from schedd.cli.schedd_main import main as schedd_cli

TEXT_HEAD = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} (?P<level>\S+) +(?P<logger>\S+): ")
ISO_UTC_MS = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")


class Capture:
    """A logger of its own (not propagating) writing through one handler into a buffer."""

    def __init__(self, fmt: str) -> None:
        name = f"schedd.test.{fmt}"
        self.buffer = io.StringIO()
        self.handler = logging.StreamHandler(self.buffer)
        self.handler.setFormatter(make_formatter(fmt))
        self.logger = logging.getLogger(name)
        self.logger.propagate = False
        self.logger.setLevel(logging.DEBUG)
        self.logger.addHandler(self.handler)

    def close(self) -> None:
        self.logger.removeHandler(self.handler)
        self.logger.propagate = True
        self.logger.setLevel(logging.NOTSET)

    def text(self) -> str:
        return self.buffer.getvalue()

    def objects(self) -> list[dict[str, Any]]:
        lines = self.text().splitlines()
        return [json.loads(line) for line in lines]


@pytest.fixture
def text() -> Iterator[Capture]:
    cap = Capture("text")
    yield cap
    cap.close()


@pytest.fixture
def as_json() -> Iterator[Capture]:
    cap = Capture("json")
    yield cap
    cap.close()


# -- text ----------------------------------------------------------------------------------------


def test_text_is_todays_line_then_the_records_fields(text: Capture) -> None:
    text.logger.info(
        "partition %d: loaded %d due entries, adopted %d live executions (epoch %d)",
        3, 12, 0, 41,
        extra={"node": "n1", "partition": 3},
    )  # fmt: skip
    line = text.text()
    assert line.endswith("\n") and line.count("\n") == 1
    head = TEXT_HEAD.match(line)
    assert head is not None, line
    assert head["level"] == "INFO" and head["logger"] == "schedd.test.text"
    assert line.rstrip("\n").endswith(
        ": partition 3: loaded 12 due entries, adopted 0 live executions (epoch 41)"
        " node=n1 partition=3"
    ), line


def test_text_without_fields_is_exactly_the_old_format(text: Capture) -> None:
    text.logger.warning("node %s: clock skew %d ms", "n1", 900)
    line = text.text().rstrip("\n")
    head = TEXT_HEAD.match(line)
    assert head is not None, line
    # %(asctime)s %(levelname)-5s %(name)s: %(message)s
    assert line[head.end() :] == "node n1: clock skew 900 ms"
    assert " WARNING schedd.test.text: " in line
    text.logger.info("plain")
    assert " INFO  schedd.test.text: plain\n" in text.text()


def test_text_quotes_values_that_would_not_read_back(text: Capture) -> None:
    text.logger.info(
        "x",
        extra={
            "partitions": [1, 2],
            "execution": "j-a@1",
            "token": 7,
            "reason": "lease expired",
            "empty": "",
        },
    )
    line = text.text().rstrip("\n")
    assert line.endswith(
        ': x partitions=[1,2] execution=j-a@1 token=7 reason="lease expired" empty=""'
    ), line


def test_text_shows_the_traceback_below_the_line(text: Capture) -> None:
    try:
        raise ZeroDivisionError("boom")
    except ZeroDivisionError:
        text.logger.exception("partition %d: claim-%d crashed", 5, 5, extra={"partition": 5})
    first, *rest = text.text().rstrip("\n").splitlines()
    assert first.endswith(": partition 5: claim-5 crashed partition=5"), first
    assert rest[0] == "Traceback (most recent call last):"
    assert rest[-1] == "ZeroDivisionError: boom"


# -- json ----------------------------------------------------------------------------------------


def test_json_has_the_fixed_fields_then_the_context_fields(as_json: Capture) -> None:
    as_json.logger.info(
        "execution %s missed: %s",
        "j-x@5",
        "skipped",
        extra={"token": 9, "job": "j-x", "partition": 3, "node": "n1", "execution": "j-x@5"},
    )
    (obj,) = as_json.objects()
    assert list(obj) == [
        "ts", "level", "logger", "event", "node", "partition", "job", "execution", "token",
    ]  # fmt: skip
    assert ISO_UTC_MS.match(obj["ts"]), obj["ts"]
    assert obj["level"] == "info" and obj["logger"] == "schedd.test.json"
    assert obj["event"] == "execution j-x@5 missed: skipped"
    assert (obj["node"], obj["partition"], obj["job"]) == ("n1", 3, "j-x")
    assert (obj["execution"], obj["token"]) == ("j-x@5", 9)


def test_json_timestamp_is_the_records_own_in_utc(as_json: Capture) -> None:
    record = as_json.logger.makeRecord(
        as_json.logger.name, logging.WARNING, __file__, 1, "at %s", ("then",), None
    )
    record.created, record.msecs = 1_765_000_000.25, 250.0  # 2025-12-06T05:46:40.250Z
    as_json.logger.handle(record)
    (obj,) = as_json.objects()
    assert obj["ts"] == "2025-12-06T05:46:40.250Z"
    assert obj["level"] == "warning" and obj["event"] == "at then"


def test_json_without_fields_has_only_the_fixed_ones(as_json: Capture) -> None:
    as_json.logger.debug("nothing else")
    (obj,) = as_json.objects()
    assert set(obj) == {"ts", "level", "logger", "event"}
    assert obj["level"] == "debug" and obj["event"] == "nothing else"


def test_json_carries_the_traceback_in_exception(as_json: Capture) -> None:
    try:
        raise KeyError("k")
    except KeyError:
        as_json.logger.exception("settling %d results failed", 2, extra={"partition": 1})
    lines = as_json.text().splitlines()
    assert len(lines) == 1, lines  # the traceback's newlines are escaped
    obj = json.loads(lines[0])
    assert obj["level"] == "error" and obj["event"] == "settling 2 results failed"
    assert obj["partition"] == 1
    assert obj["exception"].startswith("Traceback (most recent call last):")
    assert obj["exception"].rstrip().endswith("KeyError: 'k'")
    assert list(obj)[-1] == "exception"


def test_json_keeps_odd_values_and_names(as_json: Capture) -> None:
    as_json.logger.info("odd", extra={"partitions": (1, 2), "when": b"\x00"})
    as_json.logger.info("%s", "line\nbreak")
    assert as_json.text().count("\n") == 2  # one line each
    first, second = as_json.objects()
    assert first["partitions"] == [1, 2] and first["when"] == "b'\\x00'"
    assert second["event"] == "line\nbreak"


def test_a_context_field_cannot_take_a_fixed_fields_name(as_json: Capture) -> None:
    log = structlog.wrap_logger(
        as_json.logger,
        processors=[structlog.stdlib.ProcessorFormatter.wrap_for_formatter],
        wrapper_class=structlog.stdlib.BoundLogger,
    )
    log.info("bound", level="mine", job="j-1")
    (obj,) = as_json.objects()
    assert obj["level"] == "info" and obj["level_"] == "mine" and obj["job"] == "j-1"


# -- structlog loggers ---------------------------------------------------------------------------


def test_structlog_loggers_come_out_like_stdlib_ones(as_json: Capture, text: Capture) -> None:
    for cap in (as_json, text):
        log = structlog.wrap_logger(
            cap.logger,
            processors=[structlog.stdlib.ProcessorFormatter.wrap_for_formatter],
            wrapper_class=structlog.stdlib.BoundLogger,
        )
        log.bind(partition=4).warning("window reloaded", execution="j-b@2", token=3)
    (obj,) = as_json.objects()
    assert obj["level"] == "warning" and obj["logger"] == "schedd.test.json"
    assert (obj["event"], obj["partition"], obj["execution"], obj["token"]) == (
        "window reloaded", 4, "j-b@2", 3,
    )  # fmt: skip
    line = text.text().rstrip("\n")
    assert TEXT_HEAD.match(line) is not None, line
    assert line.endswith("WARNING schedd.test.text: window reloaded partition=4 execution=j-b@2"
                         " token=3"), line  # fmt: skip


# -- the process's own fields --------------------------------------------------------------------


def test_process_fields_fill_in_what_a_record_lacks(as_json: Capture, text: Capture) -> None:
    worker_id: list[str | None] = [None]
    fields = ProcessFields()
    fields.fields.update(node="n1", worker=lambda: worker_id[0])
    for cap in (as_json, text):
        cap.handler.addFilter(fields)
    as_json.logger.info("before the worker has an id")
    worker_id[0] = "w-7"
    as_json.logger.info("a peer's line", extra={"node": "n2"})
    first, second = as_json.objects()
    assert first["node"] == "n1" and "worker" not in first
    assert second["node"] == "n2" and second["worker"] == "w-7"
    # Text leaves out the process's own values, given or not, and keeps any other.
    text.logger.info("mine")
    text.logger.info("mine too", extra={"node": "n1", "partition": 2})
    text.logger.info("a peer's line", extra={"node": "n2"})
    mine, mine_too, peer = text.text().splitlines()
    assert mine.endswith(": mine"), mine
    assert mine_too.endswith(": mine too partition=2"), mine_too
    assert peer.endswith(": a peer's line node=n2"), peer  # worker: the process's own


# -- configure_logging and the CLI ---------------------------------------------------------------


@contextlib.contextmanager
def bare_root() -> Iterator[None]:
    """The root logger without the test run's capture handlers (restored after); entered in
    the test's body, as pytest adds its capture handlers once the fixtures are set up."""
    root = logging.getLogger()
    schedd = logging.getLogger("schedd")
    saved = (root.handlers[:], root.level, schedd.level, sys.excepthook, threading.excepthook)
    fields = dict(_logfmt._process_fields.fields)
    root.handlers.clear()
    try:
        yield
    finally:
        if _logfmt._installed is not None:
            root.removeHandler(_logfmt._installed)
            _logfmt._installed = None
        root.handlers[:] = saved[0]
        root.setLevel(saved[1])
        schedd.setLevel(saved[2])
        sys.excepthook, threading.excepthook = saved[3], saved[4]
        logging.captureWarnings(False)
        _logfmt._process_fields.fields.clear()
        _logfmt._process_fields.fields.update(fields)
        structlog.reset_defaults()


def test_configure_json_routes_stdlib_structlog_and_warnings() -> None:
    out = io.StringIO()
    with bare_root():
        assert configure_logging("debug", "json", stream=out) is not None
        assert json_logs()
        bind_process(node="n9")
        logging.getLogger("schedd.node._node").debug("node %s serving", "n9")
        logging.getLogger("grpc._cython").debug("library chatter stays out at debug")
        structlog.get_logger("schedd.cli").info("from structlog", partition=2)
        warnings.warn("careful", UserWarning, stacklevel=1)
    objs = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [o["logger"] for o in objs] == ["schedd.node._node", "schedd.cli", "py.warnings"]
    assert all(o["node"] == "n9" for o in objs)
    assert objs[0]["level"] == "debug" and objs[1]["partition"] == 2
    assert "careful" in objs[2]["event"]


def test_configure_text_then_json_replaces_its_own_handler() -> None:
    first, second = io.StringIO(), io.StringIO()
    with bare_root():
        configure_logging("info", "text", stream=first)
        assert not json_logs()
        configure_logging("info", "json", stream=second)
        assert logging.getLogger().handlers == [_logfmt._installed]
        logging.getLogger("schedd.x").info("once")
    assert first.getvalue() == ""
    assert json.loads(second.getvalue())["event"] == "once"


def test_configure_leaves_a_root_someone_else_configured() -> None:
    theirs = logging.StreamHandler(io.StringIO())
    with bare_root():
        logging.getLogger().addHandler(theirs)
        assert configure_logging("warning", "json") is None
        assert logging.getLogger().handlers == [theirs] and not json_logs()
        assert logging.getLogger("schedd").level == logging.WARNING


def test_an_unknown_format_is_refused() -> None:
    with pytest.raises(ValueError, match="text, json"):
        make_formatter("xml")


def test_cli_log_format_option(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SCHEDD_LOG_FORMAT", raising=False)
    bad = CliRunner().invoke(schedd_cli, ["--log-format", "xml", "node", "--help"])
    assert bad.exit_code == 2
    errors = [ln for ln in bad.output.splitlines() if ln.startswith("Error:")]
    assert len(errors) == 1 and "'--log-format'" in errors[0] and "'xml'" in errors[0], bad.output
    env_bad = CliRunner().invoke(schedd_cli, ["node", "--help"], env={"SCHEDD_LOG_FORMAT": "yaml"})
    assert env_bad.exit_code == 2 and "'yaml'" in env_bad.output
    for args, env in (
        (["--log-format", "json"], {}),
        (["--log-format", "JSON"], {}),
        ([], {"SCHEDD_LOG_FORMAT": "json"}),
    ):
        ok = CliRunner().invoke(schedd_cli, [*args, "node", "--help"], env=env)
        assert ok.exit_code == 0, ok.output
    helped = CliRunner().invoke(schedd_cli, ["--help"])
    assert "--log-format [text|json]" in helped.output

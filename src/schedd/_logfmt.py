"""How the daemons (``schedd node``, ``schedd worker``, ``schedd dev``) write their logs.

One handler on the root logger writes to stderr through structlog's
:class:`~structlog.stdlib.ProcessorFormatter`, so the library's stdlib ``logging`` calls and
any structlog logger come out alike, one line per event:

* ``text`` (the default), the line schedd always wrote, then the record's context fields::

    2026-12-06 02:14:29,459 INFO  schedd.node._partition: partition 3: loaded 12 due entries, \
adopted 0 live executions (epoch 41) partition=3

* ``json``, one object per line: ``ts`` (ISO-8601, UTC, ms), ``level``, ``logger``, ``event``
  (the message), the context fields, and ``exception`` (the traceback) when one was logged.

Context fields are what a call passes with ``extra={...}`` (the library uses ``node``,
``worker``, ``partition``, ``partitions``, ``job``, ``execution`` and ``token``), what
structlog binds, and what :func:`bind_process` gives every record of the process (the node's
id, the worker's): JSON carries those on every line; text leaves out a field that holds the
process's own value, as every line of the process would repeat it.

The library itself only ever logs through ``logging`` and configures nothing: only the CLI
calls :func:`configure_logging`.
"""

from __future__ import annotations

import json
import logging
import sys
import threading
import time
from collections.abc import Callable
from types import TracebackType
from typing import Any, TextIO

import structlog
from structlog.typing import EventDict, Processor, WrappedLogger

#: The values of ``--log-format``.
LOG_FORMATS = ("text", "json")
#: The context fields schedd's own calls pass, in the order a line shows them; any other
#: field follows them, in the order it was given.
CONTEXT_FIELDS = ("node", "worker", "partition", "partitions", "job", "execution", "token")
#: The fields every JSON line starts with (a context field of the same name is renamed).
_FIXED = ("ts", "level", "logger", "event")
#: The attributes every LogRecord has: anything else on one came with ``extra=``.
_RECORD_ATTRS = frozenset(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {
    "message",
    "asctime",
    "taskName",
}
#: Names a record's fields that hold the process's own values (text leaves them out).
_BOUND_ATTR = "_schedd_bound"

FieldValue = str | Callable[[], str | None] | None


class ProcessFields(logging.Filter):
    """Adds the process's own fields (``node``, ``worker``) to every record lacking them, and
    notes on the record which of its fields hold the process's own values (text omits those).

    A value may be a callable, read at each record: a worker's id is known only once it
    started. ``None`` (or a callable answering ``None`` or ``""``) adds nothing.
    """

    def __init__(self) -> None:
        super().__init__()
        self.fields: dict[str, FieldValue] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        own: list[str] = []
        attrs = record.__dict__
        for key, value in self.fields.items():
            got = value() if callable(value) else value
            if not got:
                continue
            if key not in attrs:
                attrs[key] = got
            elif attrs[key] != got:
                continue  # the record is about another node (worker): its own value stays
            own.append(key)
        if own:
            attrs[_BOUND_ATTR] = (*attrs.get(_BOUND_ATTR, ()), *own)
        return True


#: The filter on the daemons' handler; :func:`bind_process` fills it.
_process_fields = ProcessFields()
#: The handler :func:`configure_logging` installed (replaced by a second call), its format.
_installed: logging.Handler | None = None
_installed_format = ""


def json_logs() -> bool:
    """Whether :func:`configure_logging` installed ``json`` logs: then whatever the CLI has
    to say on stderr goes through logging too, so that every line stays an object."""
    return _installed is not None and _installed_format == "json"


def bind_process(**fields: FieldValue) -> None:
    """Give every record this process logs these fields (when it has none of that name):
    ``bind_process(node="n1")``, ``bind_process(worker=lambda: worker.worker_id)``.
    Harmless when logging was not configured by :func:`configure_logging`."""
    _process_fields.fields.update(fields)


# -- the processors ------------------------------------------------------------------------------


def _extras(record: logging.LogRecord) -> dict[str, Any]:
    """What came with the record beyond the standard attributes (``extra=``, the filter)."""
    return {
        k: v for k, v in record.__dict__.items() if k not in _RECORD_ATTRS and not k.startswith("_")
    }


def _shape(_: WrappedLogger, __: str, ed: EventDict) -> EventDict:
    """The event as the renderers want it: the fixed fields, the context fields in their
    order, the others, then the exception; the record's time and bound fields for text."""
    record: logging.LogRecord = ed.pop("_record")
    ed.pop("_from_structlog", None)
    fields: dict[str, Any] = {**_extras(record), **ed}  # structlog's bound values win
    out: dict[str, Any] = {
        "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
        + f".{int(record.msecs):03d}Z",
        "level": record.levelname.lower(),
        "logger": record.name,
        "event": fields.pop("event", ""),
    }
    tail = {k: fields.pop(k) for k in ("exception", "stack_info") if fields.get(k)}
    if tail.get("stack_info") is True:  # structlog's stack_info=True, not rendered here
        del tail["stack_info"]
    for key in CONTEXT_FIELDS:
        if key in fields:
            out[key] = fields.pop(key)
    for key, value in fields.items():
        out[key + "_" if key in _FIXED else key] = value
    out.update(tail)
    out["_record"] = record
    return out


def _text_value(value: Any) -> str:
    """A field's value as ``key=value`` shows it: bare when that reads back unambiguously,
    else quoted as JSON (a string with spaces, quotes or ``=``; lists; empty strings)."""
    if isinstance(value, bool | int | float):
        return str(value)
    if isinstance(value, str):
        if value and value.isprintable() and not any(c in value for c in ' "=\\'):
            return value
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, list | tuple | dict):
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)
    return _text_value(str(value))


def render_text(_: WrappedLogger, __: str, ed: EventDict) -> str:
    """Today's line (local time, level, logger, message), the context fields the record
    itself carries as `` key=value``, then the traceback on the lines below."""
    record: logging.LogRecord = ed.pop("_record")
    bound = set(getattr(record, _BOUND_ATTR, ()))
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(record.created))
    line = f"{stamp},{int(record.msecs):03d} {record.levelname:<5} {record.name}: {ed['event']}"
    pairs = [
        f" {k}={_text_value(v)}"
        for k, v in ed.items()
        if k not in _FIXED and k not in ("exception", "stack_info") and k not in bound
    ]
    text = line + "".join(pairs)
    for key in ("exception", "stack_info"):
        if ed.get(key):
            text += "\n" + str(ed[key]).rstrip("\n")
    return text


def render_json(_: WrappedLogger, __: str, ed: EventDict) -> str:
    """One JSON object on one line (newlines inside values are escaped)."""
    ed.pop("_record", None)
    return json.dumps(ed, ensure_ascii=False, default=str)


def _processors(fmt: str) -> list[Processor]:
    if fmt not in LOG_FORMATS:
        raise ValueError(f"log format must be one of {', '.join(LOG_FORMATS)}, got {fmt!r}")
    return [
        structlog.processors.format_exc_info,  # exc_info -> "exception" (the traceback)
        _shape,
        render_json if fmt == "json" else render_text,
    ]


def make_formatter(fmt: str = "text") -> structlog.stdlib.ProcessorFormatter:
    """The formatter for ``fmt`` (``text`` or ``json``), for stdlib and structlog records."""
    return structlog.stdlib.ProcessorFormatter(
        processors=_processors(fmt),
        foreign_pre_chain=[structlog.contextvars.merge_contextvars],
    )


def configure_logging(
    level: str = "info", fmt: str = "text", *, stream: TextIO | None = None
) -> logging.Handler | None:
    """Send the process's logs to ``stream`` (stderr) in ``fmt``; for the CLI only.

    ``level`` applies to schedd's own loggers; the libraries' (gRPC, asyncio, the etcd
    client) stay at INFO or above, so ``debug`` shows what schedd decided without their
    chatter. Like :func:`logging.basicConfig`, it adds nothing when the root logger already
    has a handler someone else put there (a test's capture); returns the handler it added.
    Structlog loggers are routed through the same handler. In ``json``, warnings and
    uncaught exceptions are logged too, so every line of stderr stays an object.
    """
    global _installed, _installed_format
    formatter = make_formatter(fmt)
    wanted = getattr(logging, level.upper(), logging.INFO)
    root = logging.getLogger()
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.stdlib.filter_by_level,
            structlog.stdlib.PositionalArgumentsFormatter(),
            structlog.stdlib.ProcessorFormatter.wrap_for_formatter,
        ],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=True,
    )
    logging.getLogger("schedd").setLevel(wanted)
    if _installed is not None and _installed in root.handlers:
        root.removeHandler(_installed)
        _installed = None
    if root.handlers:
        return None
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler.setFormatter(formatter)
    handler.addFilter(_process_fields)
    root.addHandler(handler)
    root.setLevel(max(wanted, logging.INFO))
    _installed, _installed_format = handler, fmt
    if fmt == "json":
        logging.captureWarnings(True)
        sys.excepthook = _log_uncaught
        threading.excepthook = _log_thread_uncaught
    return handler


def _log_uncaught(kind: type[BaseException], exc: BaseException, tb: TracebackType | None) -> None:
    if issubclass(kind, KeyboardInterrupt):
        sys.__excepthook__(kind, exc, tb)
        return
    logging.getLogger("schedd").critical("uncaught exception: %r", exc, exc_info=(kind, exc, tb))


def _log_thread_uncaught(args: threading.ExceptHookArgs) -> None:
    if args.exc_value is None or issubclass(args.exc_type, SystemExit):
        return
    name = args.thread.name if args.thread is not None else "?"
    logging.getLogger("schedd").critical(
        "uncaught exception in thread %s: %r",
        name,
        args.exc_value,
        exc_info=(args.exc_type, args.exc_value, args.exc_traceback),
    )

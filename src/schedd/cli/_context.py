"""What every schedctl command shares: global settings, the client, and local input parsing."""

from __future__ import annotations

import json
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar

import click

from schedd._errors import NotFound
from schedd.cli._output import FORMATS
from schedd.client import Client, ClientTls
from schedd.v1 import job_pb2

F = TypeVar("F", bound=Callable[..., Any])
#: Where schedctl looks when no endpoint is given.
DEFAULT_ENDPOINT = "127.0.0.1:7070"


def join_endpoints(endpoints: str | None, more: tuple[str, ...] = ()) -> str:
    """``--endpoints`` (comma-separated) and each ``--endpoint`` as one comma-separated list;
    the default endpoint when neither is given. Checked when the client is made."""
    items = [e for e in (endpoints, *more) if e and e.strip()]
    return ",".join(items) if items else DEFAULT_ENDPOINT


@dataclass
class Settings:
    """Global options, read once at the edge."""

    endpoints: str = DEFAULT_ENDPOINT
    timeout_s: float = 10.0
    output: str = "table"
    #: The API token sent with every call (--token / SCHEDCTL_TOKEN), None: none.
    token: str | None = field(default=None, repr=False)
    #: TLS to the nodes (--cacert, --cert, --key, --tls-server-name; None: plaintext).
    tls: ClientTls | None = None
    _client: Client | None = field(default=None, repr=False)

    def client(self) -> Client:
        """The client, created on first use (so bad local input never opens a channel)."""
        if self._client is None:
            self._client = Client(
                self.endpoints, timeout_s=self.timeout_s, tls=self.tls, token=self.token
            )
        return self._client

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None


def settings() -> Settings:
    """The current command's settings."""
    return click.get_current_context().ensure_object(Settings)


@contextmanager
def until_ctrl_c() -> Iterator[threading.Event]:
    """How a ``--watch`` ends: Ctrl-C sets the event (no exception in the middle of a call),
    the refresh under way finishes, and the command exits 0, quietly."""
    stop = threading.Event()
    previous = signal.signal(signal.SIGINT, lambda *_: stop.set())
    try:
        yield stop
    finally:
        signal.signal(signal.SIGINT, previous)


def find_job(ref: str) -> job_pb2.Job:
    """The job ``ref`` names: its id, else its name (``TENANT/NAME`` for a tenant's)."""
    tenant, _, name = ref.rpartition("/")  # names hold no "/": the tenant is what is before
    client = settings().client()
    if tenant:
        return client.get_job_by_name(name, tenant)
    return client.find_job(ref)


def job_id_of(ref: str, *, gone_ok: bool = False) -> str:
    """The id of the job ``ref`` names ("" stays "": no job filter). ``gone_ok``: a ref no
    job has is taken as the id of a deleted one (its runs and dead letters outlive it)."""
    if not ref:
        return ""
    try:
        return find_job(ref).id
    except NotFound:
        if gone_ok and "/" not in ref:
            return ref
        raise


def _set_output(ctx: click.Context, _param: click.Parameter, value: str | None) -> None:
    if value is not None:
        ctx.ensure_object(Settings).output = value


def output_option(func: F) -> F:
    """``-o/--output``, accepted after the subcommand too (it overrides the global one)."""
    return click.option(
        "-o",
        "--output",
        type=click.Choice(FORMATS),
        default=None,
        expose_value=False,
        is_eager=True,
        callback=_set_output,
        help="Output format.",
    )(func)


def parse_json(option: str, text: str | None) -> Any:
    """The value of a JSON option; a click usage error naming the option when it does not parse.

    ``@PATH`` reads the JSON from a file, ``-`` from standard input.
    """
    if text is None:
        return None
    if text == "-":
        text = sys.stdin.read()
        option = f"{option} - (stdin)"
    elif text.startswith("@"):
        path = text[1:]
        try:
            with open(path, encoding="utf-8") as f:
                text = f.read()
        except (OSError, UnicodeDecodeError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            raise click.BadParameter(f"cannot read {path}: {reason}", param_hint=option) from exc
        option = f"{option} @{path}"
    try:
        return json.loads(text)
    except ValueError as exc:
        raise click.BadParameter(f"not valid JSON ({exc})", param_hint=option) from exc


def parse_pairs(option: str, pairs: tuple[str, ...], sep: str = "=") -> dict[str, str]:
    """``KEY<sep>VALUE`` values of a repeatable option as a dict; a usage error naming the
    option for one without a key. With ``sep=":"`` (HTTP headers) key and value are
    stripped; with ``=`` they are kept as written."""
    out: dict[str, str] = {}
    for pair in pairs:
        key, found, value = pair.partition(sep)
        if sep == ":":
            key, value = key.strip(), value.strip()
        if not found or not key:
            raise click.BadParameter(f"{pair!r} is not KEY{sep}VALUE", param_hint=option)
        out[key] = value
    return out


def parse_labels(pairs: tuple[str, ...]) -> dict[str, str] | None:
    """``("team=ops", "tier=1")`` -> ``{"team": "ops", "tier": "1"}`` (None when empty)."""
    return parse_pairs("--label", pairs) or None

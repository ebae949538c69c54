"""The blocking Client is the AsyncClient run on a private loop: same methods, same
signatures, one thread per client, usable from async code."""

from __future__ import annotations

import asyncio
import inspect
import threading

import pytest
from test_client_servicer import Served, served

from schedd.client import AsyncClient, Client, build_job

__all__ = ["served"]


def _public(cls: type) -> set[str]:
    return {
        n
        for c in cls.__mro__[:-1]  # its bases too (AsyncClient's admin calls), not object's
        for n, v in vars(c).items()
        if not n.startswith("_") and callable(v)
    }


def test_every_async_method_has_a_blocking_twin_with_its_signature() -> None:
    assert _public(AsyncClient) - {"close"} == _public(Client) - {"close"}
    for name in _public(AsyncClient) - {"close"}:
        sync, coro = getattr(Client, name), getattr(AsyncClient, name)
        params = list(inspect.signature(coro).parameters.values())
        assert list(inspect.signature(sync).parameters.values()) == params, name
        assert sync.__doc__ == coro.__doc__, name


def test_create_job_takes_exactly_build_jobs_arguments() -> None:
    built = list(inspect.signature(build_job).parameters)
    assert list(inspect.signature(AsyncClient.create_job).parameters) == ["self", *built]


def test_create_sends_a_built_job(served: Served) -> None:
    with Client(served.endpoint) as client:
        job = build_job("x", schedule="@every 10s", handler="h", tenant="t")
        assert client.create(job).created
    assert served.servicer.last("CreateJob").job.tenant == "t"


def test_a_client_owns_one_thread_until_closed(served: Served) -> None:
    def ours() -> list[threading.Thread]:
        return [t for t in threading.enumerate() if t.name == "schedd-client"]

    before = len(ours())
    client = Client(served.endpoint)
    assert len(ours()) == before + 1
    assert client.get_job("j-1").id == "j-1"
    assert client.target == f"ipv4:{served.endpoint}" and client.timeout_s == 10.0
    client.close()
    client.close()  # a second close does nothing
    assert len(ours()) == before
    with pytest.raises(RuntimeError, match="closed"):
        client.get_job("j-1")


def test_leaving_an_iteration_early_closes_the_generator(served: Served) -> None:
    with Client(served.endpoint) as client:
        jobs = client.list_jobs(page_size=2)
        first = next(jobs)
        jobs.close()
        assert first.id and len(list(client.list_jobs(page_size=4))) == 6


async def test_the_blocking_client_works_from_inside_a_running_loop(served: Served) -> None:
    with Client(served.endpoint) as client:  # its own loop: this one is not re-entered
        assert client.get_job("j-1").id == "j-1"
    await asyncio.sleep(0)

"""The asyncio client (grpc.aio): the methods of :class:`~schedd.client.Client` as coroutines."""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
from collections.abc import AsyncGenerator, Callable, Coroutine, Iterable, Sequence
from datetime import datetime
from types import TracebackType
from typing import Any, Concatenate, ParamSpec, TypeVar, cast

import grpc
import grpc.aio

from schedd._errors import InvalidArgument, NotFound, SchedError
from schedd._metadata import AUTHORIZATION, MetadataInterceptor
from schedd._status import from_rpc_error, item_error_to_exception
from schedd.client._admin import AdminCalls
from schedd.client._channel import ChannelSpec, TlsOption, channel_spec
from schedd.client._convert import encode_payload, parse_time_ms
from schedd.client._failover import FailoverStub
from schedd.client._requests import (
    UNSET,
    BackfillResult,
    CreateJobResult,
    ExecutionList,
    build_job,
    build_update,
    state_values,
)
from schedd.v1 import execution_pb2, job_pb2, scheduler_pb2, scheduler_pb2_grpc

log = logging.getLogger("schedd.client")

#: The most jobs one ``BatchCreateJobs`` call may carry (the node refuses more).
MAX_BATCH = 10_000
#: :meth:`AsyncClient.create_jobs`: jobs per call, and calls at once (measured with
#: ``scripts/bench/create.py``: docs/performance.md).
CREATE_CHUNK = 1000
CREATE_IN_FLIGHT = 4
#: ... and at most this many bytes of jobs per call, so a call fits the smallest message
#: limit a node may have (``--max-message-bytes``, 4 MiB at least).
CREATE_CHUNK_BYTES = 3 << 20
_Resp = TypeVar("_Resp")
_P = ParamSpec("_P")
_Time = datetime | str | int


def _creating(
    build: Callable[_P, job_pb2.Job],
) -> Callable[Concatenate[AsyncClient, _P], Coroutine[Any, Any, CreateJobResult]]:
    """An ``AsyncClient`` method that builds a Job with ``build`` and creates it."""

    async def create_job(
        self: AsyncClient, /, *args: _P.args, **kwargs: _P.kwargs
    ) -> CreateJobResult:
        return await self.create(build(*args, **kwargs))

    create_job.__doc__ = (
        "Create a job; arguments as in :func:`schedd.client.build_job` (the Job it builds is"
        " sent as by :meth:`create`).\n\nReturns:\n    The stored job and whether it was"
        " created (False: same idempotency key)."
    )
    sig = inspect.signature(build)
    self_param = inspect.Parameter("self", inspect.Parameter.POSITIONAL_ONLY)
    create_job.__signature__ = sig.replace(  # type: ignore[attr-defined]
        parameters=[self_param, *sig.parameters.values()], return_annotation="CreateJobResult"
    )
    return create_job


class AsyncClient(AdminCalls):
    """An asyncio client of the Scheduler API (create it inside the running loop).

    Every call has a deadline (``timeout_s``) and raises a :class:`~schedd.SchedError`
    subclass on failure (``NotFound``, ``InvalidArgument`` with its ``field``, ``Unavailable``
    when no node answers, ...). With several endpoints a call goes to the one that answered
    last; one that is down is skipped, and idempotent calls (reads, creates with an
    idempotency key) are sent again to the next node (see ``schedd.client._failover``)::

        async with AsyncClient("10.0.0.1:7070,10.0.0.2:7070") as client:
            job = (await client.create_job("report", schedule="0 9 * * 1-5", tz="Europe/Berlin",
                                           handler="send_report")).job
    """

    def __init__(
        self,
        endpoints: str | Sequence[str] = "127.0.0.1:7070",
        *,
        timeout_s: float = 10.0,
        tls: TlsOption = None,
        token: str | None = None,
    ) -> None:
        """Prepare one channel per endpoint (each connects on first use).

        Args:
            endpoints: ``HOST:PORT`` items, as a sequence or comma-separated.
            timeout_s: The deadline of every call (all its tries on every node), in seconds.
            tls: TLS to the nodes: True (verified against the system's CAs), the path of the
                CA certificate that signed them, or a :class:`~schedd.client.ClientTls` (a CA,
                a client certificate and key for nodes that require one, a server name).
                None: plaintext.
            token: an API token (``sdt_...``), sent with every call (clusters with auth on).

        Raises:
            InvalidArgument: A TLS file that cannot be used (``field``: ``tls`` or
                ``tls.cert_file``...), or a token that cannot travel as metadata. A node that
                refuses the TLS settings (or speaks TLS to a plaintext client) fails each call
                with :class:`~schedd.TlsHandshakeFailed`, an ``Unavailable`` that says why.
        """
        spec = channel_spec(endpoints, tls)
        interceptors = [MetadataInterceptor(AUTHORIZATION, bearer(token))] if token else None
        self.timeout_s = timeout_s
        self.target = spec.target
        #: The endpoints, in the order given (duplicates dropped).
        self.endpoints = spec.endpoints
        self._failover = FailoverStub(
            spec.endpoints,
            spec.targets,
            functools.partial(_open_channel, spec, interceptors),
            connect_timeout_s=min(2.0, timeout_s),
            tls=spec.tls,
        )
        # The failover stub has the stub's methods (by name); typed as one for _call.
        self._stub = cast("scheduler_pb2_grpc.SchedulerAsyncStub", self._failover)

    async def _call(
        self, method: grpc.aio.UnaryUnaryMultiCallable[Any, _Resp], request: Any
    ) -> _Resp:
        try:
            return await method(request, timeout=self.timeout_s)
        except grpc.RpcError as exc:
            err = from_rpc_error(exc)
            log.debug("call failed: %s", err)
            raise err from None

    # -- jobs -----------------------------------------------------------------------------------
    async def create(self, job: job_pb2.Job) -> CreateJobResult:
        """Create the job ``job`` describes (see :func:`schedd.client.build_job`).

        Returns:
            The stored job and whether it was created (False: same idempotency key).
        """
        resp = await self._call(self._stub.CreateJob, scheduler_pb2.CreateJobRequest(job=job))
        return CreateJobResult(resp.job, resp.created, tuple(resp.warnings))

    #: ``create_job(name, *, schedule, ...)``: :meth:`create` with the job built from exactly
    #: :func:`~schedd.client.build_job`'s arguments (the signature is written there only).
    create_job = _creating(build_job)

    async def create_jobs(
        self,
        jobs: Sequence[job_pb2.Job],
        *,
        chunk: int = CREATE_CHUNK,
        in_flight: int = CREATE_IN_FLIGHT,
        progress: Callable[[int, int], None] | None = None,
    ) -> list[job_pb2.Job | SchedError]:
        """Create many jobs: per item, in order, the stored job or the error it failed with.

        Any number of jobs: they go as ``BatchCreateJobs`` calls of ``chunk`` jobs (fewer when
        they would carry more than 3 MiB), up to ``in_flight`` of them at once (the node
        validates one while etcd writes another).
        ``progress(done, total)`` is called after each call returns (in the client's event
        loop: keep it quick). A call that fails as a whole (the node unreachable, a deadline)
        raises; the calls already answered have created their jobs, and creating the same jobs
        again is safe when they carry idempotency keys.
        """
        if chunk < 1 or chunk > MAX_BATCH:
            raise InvalidArgument("chunk", f"must be between 1 and {MAX_BATCH}, got {chunk}")
        if in_flight < 1:
            raise InvalidArgument("in_flight", f"must be at least 1, got {in_flight}")
        total = len(jobs)
        parts: dict[int, list[job_pb2.Job | SchedError]] = {}
        bounds = chunk_bounds([j.ByteSize() for j in jobs], chunk, CREATE_CHUNK_BYTES)
        starts = [lo for lo, _ in bounds]
        done = 0
        gate = asyncio.Semaphore(in_flight)

        async def send(lo: int, hi: int) -> None:
            nonlocal done
            async with gate:
                req = scheduler_pb2.BatchCreateJobsRequest(jobs=jobs[lo:hi])
                resp = await self._call(self._stub.BatchCreateJobs, req)
            parts[lo] = [
                r.ok.job if r.WhichOneof("outcome") == "ok" else item_error_to_exception(r.error)
                for r in resp.results
            ]
            done += len(resp.results)
            if progress is not None:
                progress(done, total)

        tasks = [asyncio.ensure_future(send(lo, hi)) for lo, hi in bounds]
        try:
            await asyncio.gather(*tasks)
        except BaseException:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            raise
        return [item for lo in starts for item in parts[lo]]

    async def get_job(self, job_id: str) -> job_pb2.Job:
        """The job with this id (``NotFound`` if none)."""
        return await self._call(self._stub.GetJob, scheduler_pb2.GetJobRequest(id=job_id))

    async def get_job_by_name(self, name: str, tenant: str = "") -> job_pb2.Job:
        """The job named ``name`` in ``tenant`` (empty: the token's tenant, else "default");
        ``NotFound`` if none."""
        req = scheduler_pb2.GetJobRequest(name=name, tenant=tenant)
        return await self._call(self._stub.GetJob, req)

    async def find_job(self, ref: str, tenant: str = "") -> job_pb2.Job:
        """The job whose id is ``ref``, else the one named ``ref`` in ``tenant``."""
        try:
            return await self.get_job(ref)
        except (NotFound, InvalidArgument):  # not an id, or no job has it
            pass
        try:
            return await self.get_job_by_name(ref, tenant)
        except NotFound:
            raise NotFound(f"no job with id or name {ref!r}") from None

    async def list_jobs_page(
        self, tenant: str = "", name_prefix: str = "", page_size: int = 100, page_token: str = ""
    ) -> scheduler_pb2.ListJobsResponse:
        """One page of jobs; pass its ``next_page_token`` for the next one."""
        req = scheduler_pb2.ListJobsRequest(
            tenant=tenant, name_prefix=name_prefix, page_size=page_size, page_token=page_token
        )
        return await self._call(self._stub.ListJobs, req)

    async def list_jobs(
        self, tenant: str = "", name_prefix: str = "", page_size: int = 100
    ) -> AsyncGenerator[job_pb2.Job, None]:
        """Every matching job, fetching pages as the iteration goes."""
        token = ""
        while True:
            page = await self.list_jobs_page(tenant, name_prefix, page_size, token)
            for job in page.jobs:
                yield job
            token = page.next_page_token
            if not token:
                return

    async def update_job(
        self, /, job_id: str, *, payload: Any = UNSET, expected_version: int = 0, **changes: Any
    ) -> job_pb2.Job:
        """Change the given fields only (``name``, ``schedule``, ``tz``, ``handler``,
        ``queue``, ``http``, ``shell``, ``payload``, ``max_attempts``, ``retry_initial``,
        ``retry_max``, ``retry_multiplier``, ``timeout``, ``misfire``,
        ``catch_up_limit``, ``starting_deadline``, ``overlap``, ``jitter``, ``labels``, ``after``:
        parents by id or name; ``after=[]`` makes it independent again, with a ``schedule``).

        ``payload=None`` clears the payload; a non-zero ``expected_version`` makes the update
        conditional (``Conflict`` when the stored version differs).
        """
        req = build_update(job_id, expected_version=expected_version, payload=payload, **changes)
        return await self._call(self._stub.UpdateJob, req)

    async def replace_fields(
        self, job: job_pb2.Job, paths: Sequence[str], expected_version: int = 0
    ) -> job_pb2.Job:
        """Set the fields named by ``paths`` (``MUTABLE_PATHS``: ``schedule``, ``target``,
        ``retry``, ...) of job ``job.id`` to their values in ``job``; ``Conflict`` when a
        non-zero ``expected_version`` is not the stored one. What ``schedctl apply`` sends."""
        req = scheduler_pb2.UpdateJobRequest(
            update_paths=list(paths), expected_version=expected_version
        )
        req.job.CopyFrom(job)
        return await self._call(self._stub.UpdateJob, req)

    async def delete_job(self, job_id: str) -> int:
        """Delete a job; returns how many pending executions were cancelled with it."""
        req = scheduler_pb2.DeleteJobRequest(id=job_id)
        return (await self._call(self._stub.DeleteJob, req)).cancelled_executions

    async def pause_job(self, job_id: str) -> job_pb2.Job:
        """Stop firing the job until it is resumed."""
        return await self._call(self._stub.PauseJob, scheduler_pb2.PauseJobRequest(id=job_id))

    async def resume_job(self, job_id: str) -> job_pb2.Job:
        """Resume a paused job."""
        return await self._call(self._stub.ResumeJob, scheduler_pb2.ResumeJobRequest(id=job_id))

    async def trigger_job(
        self, job_id: str, payload: Any = None, *, idempotency_key: str = ""
    ) -> execution_pb2.Execution:
        """Run the job once now; ``payload`` (if given) overrides the job's for this run.

        With ``idempotency_key``, calling again with the same key (and payload) within 24 h
        creates nothing and returns the execution the first call made (the same id), so a
        call whose answer was lost can be retried, on any node; the same key with another
        payload raises :class:`~schedd.AlreadyExists`."""
        req = scheduler_pb2.TriggerJobRequest(
            id=job_id, payload=encode_payload(payload), idempotency_key=idempotency_key
        )
        return await self._call(self._stub.TriggerJob, req)

    async def backfill_job(
        self, job_id: str, start: _Time, end: _Time, limit: int = 0, dry_run: bool = False
    ) -> BackfillResult:
        """One execution per scheduled fire in ``[start, end)`` (datetimes, ISO text or ms),
        at most ``limit`` fires a call (0: 1000); fires with a live execution are skipped.
        ``dry_run``: create nothing, say what would be created and what exists."""
        req = scheduler_pb2.BackfillJobRequest(
            id=job_id,
            start_ms=parse_time_ms(start, "start"),
            end_ms=parse_time_ms(end, "end"),
            limit=limit,
            dry_run=dry_run,
        )
        resp = await self._call(self._stub.BackfillJob, req)
        return BackfillResult(
            list(resp.executions), resp.truncated, list(resp.existing_ms), resp.next_start_ms
        )

    # -- executions -----------------------------------------------------------------------------
    async def get_execution(self, execution_id: str) -> execution_pb2.Execution:
        """The execution with this id (``"{job_id}@{scheduled_ms}"``)."""
        req = scheduler_pb2.GetExecutionRequest(id=execution_id)
        return await self._call(self._stub.GetExecution, req)

    async def cancel_execution(
        self, execution_id: str, reason: str = ""
    ) -> execution_pb2.Execution:
        """Cancel a live execution (pending, waiting for a retry, held or running); it ends
        CANCELLED with ``reason``. ``FailedPrecondition`` when it has ended already."""
        req = scheduler_pb2.CancelExecutionRequest(id=execution_id, reason=reason)
        return await self._call(self._stub.CancelExecution, req)

    async def list_executions_page(
        self,
        job_id: str = "",
        states: Iterable[int | str] = (),
        tenant: str = "",
        page_size: int = 100,
        page_token: str = "",
        *,
        root: str = "",
    ) -> scheduler_pb2.ListExecutionsResponse:
        """One page of executions from every node, newest first; pass its
        ``next_page_token`` for the next one. ``missing_nodes`` names the nodes that did not
        answer (their executions may be missing). ``root``: only one root fire's, given as
        the root's execution id ``JOB@MILLIS`` (its own and those of every job after it for
        that fire)."""
        req = scheduler_pb2.ListExecutionsRequest(
            job_id=job_id,
            tenant=tenant,
            states=state_values(states),  # type: ignore[arg-type]
            page_size=page_size,
            page_token=page_token,
            root=root,
        )
        return await self._call(self._stub.ListExecutions, req)

    async def list_executions(
        self,
        job_id: str = "",
        states: Iterable[int | str] = (),
        tenant: str = "",
        limit: int = 100,
        *,
        root: str = "",
    ) -> ExecutionList:
        """Up to ``limit`` executions from every node, newest first; ``states`` as enum values
        or names. The list's ``missing_nodes`` names the nodes that did not answer. ``root``
        (``JOB@MILLIS``): only that root fire's executions and its descendants' for it."""
        out = ExecutionList()
        missing: dict[str, scheduler_pb2.MissingNode] = {}
        token = ""
        while len(out) < limit:
            resp = await self.list_executions_page(
                job_id, states, tenant, min(limit - len(out), 1000), token, root=root
            )
            out.extend(resp.executions)
            for node in resp.missing_nodes:
                missing.setdefault(node.node_id, node)
            token = resp.next_page_token
            if not token:
                break
        del out[limit:]
        out.missing_nodes = list(missing.values())
        return out

    async def list_dead_letters(
        self, tenant: str = "", job_id: str = "", limit: int = 100
    ) -> list[execution_pb2.Execution]:
        """Up to ``limit`` executions from the dead-letter queue."""
        out: list[execution_pb2.Execution] = []
        req = scheduler_pb2.ListDeadLettersRequest(tenant=tenant, job_id=job_id)
        while len(out) < limit:
            req.page_size = min(limit - len(out), 1000)
            resp = await self._call(self._stub.ListDeadLetters, req)
            out.extend(resp.executions)
            if not resp.next_page_token:
                break
            req.page_token = resp.next_page_token
        return out[:limit]

    async def redrive(
        self,
        execution_ids: Sequence[str] = (),
        tenant: str = "",
        job_id: str = "",
        *,
        everything: bool = False,
    ) -> list[execution_pb2.Execution]:
        """Put dead executions back: the given ids, else all matching tenant and job, or with
        ``everything`` every dead letter of the cluster; returns those redriven."""
        req = scheduler_pb2.RedriveDeadLettersRequest(
            execution_ids=execution_ids, tenant=tenant, job_id=job_id, all=everything
        )
        return list((await self._call(self._stub.RedriveDeadLetters, req)).executions)

    async def cluster_status(self, local_only: bool = False) -> scheduler_pb2.ClusterStatus:
        """Nodes (each with its own report: clock skew, eligibility, the partitions it runs),
        partition owners with their epochs, and workers (once each, with every node they are
        connected to). ``missing_nodes`` names the nodes that did not answer.
        ``local_only``: only what the node asked knows, without asking its peers."""
        req = scheduler_pb2.GetClusterStatusRequest(local_only=local_only)
        return await self._call(self._stub.GetClusterStatus, req)

    async def list_queues(
        self, queue: str = "", tenant: str = ""
    ) -> scheduler_pb2.ListQueuesResponse:
        """Per queue, cluster-wide: executions due (waiting for a worker), held (sent ahead
        to a worker, not started) and running, and the workers consuming it with their
        capacity and free slots. ``queue``: only that one (listed even when empty);
        ``tenant``: only that tenant's executions (a tenant's token always gets its own, and
        no ``free_slots``). ``missing_nodes`` names the nodes that did not answer."""
        req = scheduler_pb2.ListQueuesRequest(queue=queue, tenant=tenant)
        return await self._call(self._stub.ListQueues, req)

    # -- lifecycle ------------------------------------------------------------------------------
    async def close(self) -> None:
        """Close the channels."""
        await self._failover.close()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()


def bearer(token: str) -> str:
    """The authorization metadata value of ``token``.

    Raises:
        InvalidArgument: on ``token`` when it cannot travel as metadata.
    """
    value = token.strip()
    if not value or any(c in value for c in "\r\n\0 ") or not value.isascii():
        raise InvalidArgument("token", "must be one line of ASCII without spaces (sdt_...)")
    return f"Bearer {value}"


def chunk_bounds(sizes: Sequence[int], most: int, most_bytes: int) -> list[tuple[int, int]]:
    """``(lo, hi)`` slices of items with these byte ``sizes``: at most ``most`` items and
    ``most_bytes`` bytes each, in order (an item larger than ``most_bytes`` goes alone).

    Example: sizes ``[2, 2, 2, 5, 1]``, most 3, most_bytes 5 -> ``[(0, 2), (2, 3), (3, 4),
    (4, 5)]``.
    """
    bounds: list[tuple[int, int]] = []
    lo, held = 0, 0
    for i, size in enumerate(sizes):
        if i > lo and (i - lo >= most or held + size > most_bytes):
            bounds.append((lo, i))
            lo, held = i, 0
        held += size
    if lo < len(sizes):
        bounds.append((lo, len(sizes)))
    return bounds


def _open_channel(
    spec: ChannelSpec, interceptors: list[MetadataInterceptor] | None, target: str
) -> grpc.aio.Channel:
    if spec.credentials is None:
        return grpc.aio.insecure_channel(target, options=spec.options, interceptors=interceptors)
    return grpc.aio.secure_channel(
        target, spec.credentials, spec.options, interceptors=interceptors
    )


__all__ = ["AsyncClient"]

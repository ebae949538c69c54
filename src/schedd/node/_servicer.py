"""The gRPC servicers: thin adapters from messages to :class:`NodeApi` calls (the public
Scheduler service) and to :class:`PeerAnswers` (the internal Peer service)."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import grpc

from schedd._errors import SchedError
from schedd._status import abort_with
from schedd.node._api import NodeApi
from schedd.node._cluster_views import PeerAnswers
from schedd.v1 import peer_pb2_grpc, scheduler_pb2_grpc

log = logging.getLogger(__name__)

Req = TypeVar("Req")
Resp = TypeVar("Resp")


async def _call(
    fn: Callable[[Req], Awaitable[Resp]], request: Req, context: grpc.aio.ServicerContext[Any, Any]
) -> Resp:
    try:
        return await fn(request)
    except SchedError as err:
        await abort_with(context, err)
    except Exception as exc:  # an unexpected bug: say so, never hang the caller
        log.exception("internal error in %s", getattr(fn, "__name__", fn))
        await context.abort(
            grpc.StatusCode.INTERNAL, f"internal error: {type(exc).__name__}: {exc}"
        )
    raise AssertionError("unreachable")


class SchedulerServicer(scheduler_pb2_grpc.SchedulerServicer):
    def __init__(self, api: NodeApi) -> None:
        self.api = api

    async def CreateJob(self, request: Any, context: Any) -> Any:
        return await _call(self.api.create_job, request, context)

    async def BatchCreateJobs(self, request: Any, context: Any) -> Any:
        return await _call(self.api.batch_create_jobs, request, context)

    async def GetJob(self, request: Any, context: Any) -> Any:
        return await _call(self.api.get_job, request, context)

    async def ListJobs(self, request: Any, context: Any) -> Any:
        return await _call(self.api.list_jobs, request, context)

    async def UpdateJob(self, request: Any, context: Any) -> Any:
        return await _call(self.api.update_job, request, context)

    async def DeleteJob(self, request: Any, context: Any) -> Any:
        return await _call(self.api.delete_job, request, context)

    async def PauseJob(self, request: Any, context: Any) -> Any:
        return await _call(self.api.pause_job, request, context)

    async def ResumeJob(self, request: Any, context: Any) -> Any:
        return await _call(self.api.resume_job, request, context)

    async def TriggerJob(self, request: Any, context: Any) -> Any:
        return await _call(self.api.trigger_job, request, context)

    async def BackfillJob(self, request: Any, context: Any) -> Any:
        return await _call(self.api.backfill_job, request, context)

    async def GetExecution(self, request: Any, context: Any) -> Any:
        return await _call(self.api.get_execution, request, context)

    async def CancelExecution(self, request: Any, context: Any) -> Any:
        return await _call(self.api.cancel_execution, request, context)

    async def ListExecutions(self, request: Any, context: Any) -> Any:
        return await _call(self.api.list_executions, request, context)

    async def ListDeadLetters(self, request: Any, context: Any) -> Any:
        return await _call(self.api.list_dead_letters, request, context)

    async def RedriveDeadLetters(self, request: Any, context: Any) -> Any:
        return await _call(self.api.redrive, request, context)

    async def GetClusterStatus(self, request: Any, context: Any) -> Any:
        return await _call(self.api.cluster_status, request, context)

    async def SetTenantLimits(self, request: Any, context: Any) -> Any:
        return await _call(self.api.set_tenant_limits, request, context)

    async def GetTenantLimits(self, request: Any, context: Any) -> Any:
        return await _call(self.api.get_tenant_limits, request, context)

    async def ListTenantLimits(self, request: Any, context: Any) -> Any:
        return await _call(self.api.list_tenant_limits, request, context)

    async def DeleteTenantLimits(self, request: Any, context: Any) -> Any:
        return await _call(self.api.delete_tenant_limits, request, context)


class PeerServicer(peer_pb2_grpc.PeerServicer):
    """The internal node-to-node service: a thin adapter over :class:`PeerAnswers`."""

    def __init__(self, answers: PeerAnswers) -> None:
        self.answers = answers

    async def ListLocalExecutions(self, request: Any, context: Any) -> Any:
        return await _call(self.answers.list_local, request, context)

    async def GetLocalExecution(self, request: Any, context: Any) -> Any:
        return await _call(self.answers.get_local, request, context)

    async def GetLocalStatus(self, request: Any, context: Any) -> Any:
        return await _call(self.answers.status_local, request, context)

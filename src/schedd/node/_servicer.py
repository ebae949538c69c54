"""The gRPC servicers: thin adapters from messages to :class:`NodeApi` calls (the public
Scheduler service) and to :class:`PeerAnswers` (the internal Peer service)."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import grpc

from schedd._errors import SchedError
from schedd._metadata import AUTHORIZATION, PEER_METADATA, metadata_value
from schedd._status import abort_with
from schedd.auth import ApiGate, check_peer
from schedd.node._api import NodeApi
from schedd.node._cluster_views import PeerAnswers
from schedd.v1 import peer_pb2_grpc, scheduler_pb2_grpc

log = logging.getLogger(__name__)

Req = TypeVar("Req")
Resp = TypeVar("Resp")


async def _call(
    fn: Callable[[Req], Awaitable[Resp]],
    request: Req,
    context: grpc.aio.ServicerContext[Any, Any],
    gate: ApiGate | None = None,
    method: str = "",
) -> Resp:
    try:
        if gate is None:
            return await fn(request)
        return await gate.call(
            method, fn, request, bearer=metadata_value(context, AUTHORIZATION), peer=context.peer()
        )
    except SchedError as err:
        await abort_with(context, err)
    except Exception as exc:  # an unexpected bug: say so, never hang the caller
        log.exception("internal error in %s", getattr(fn, "__name__", fn))
        await context.abort(
            grpc.StatusCode.INTERNAL, f"internal error: {type(exc).__name__}: {exc}"
        )
    raise AssertionError("unreachable")


class SchedulerServicer(scheduler_pb2_grpc.SchedulerServicer):
    """Every call goes through the ApiGate: token, quota, caller, audit trail."""

    def __init__(self, api: NodeApi, gate: ApiGate | None = None) -> None:
        self.api = api
        self.gate = gate or ApiGate(auth=False)

    async def CreateJob(self, request: Any, context: Any) -> Any:
        return await _call(self.api.create_job, request, context, self.gate, "CreateJob")

    async def BatchCreateJobs(self, request: Any, context: Any) -> Any:
        return await _call(
            self.api.batch_create_jobs, request, context, self.gate, "BatchCreateJobs"
        )

    async def GetJob(self, request: Any, context: Any) -> Any:
        return await _call(self.api.get_job, request, context, self.gate, "GetJob")

    async def ListJobs(self, request: Any, context: Any) -> Any:
        return await _call(self.api.list_jobs, request, context, self.gate, "ListJobs")

    async def UpdateJob(self, request: Any, context: Any) -> Any:
        return await _call(self.api.update_job, request, context, self.gate, "UpdateJob")

    async def DeleteJob(self, request: Any, context: Any) -> Any:
        return await _call(self.api.delete_job, request, context, self.gate, "DeleteJob")

    async def PauseJob(self, request: Any, context: Any) -> Any:
        return await _call(self.api.pause_job, request, context, self.gate, "PauseJob")

    async def ResumeJob(self, request: Any, context: Any) -> Any:
        return await _call(self.api.resume_job, request, context, self.gate, "ResumeJob")

    async def TriggerJob(self, request: Any, context: Any) -> Any:
        return await _call(self.api.trigger_job, request, context, self.gate, "TriggerJob")

    async def BackfillJob(self, request: Any, context: Any) -> Any:
        return await _call(self.api.backfill_job, request, context, self.gate, "BackfillJob")

    async def GetExecution(self, request: Any, context: Any) -> Any:
        return await _call(self.api.get_execution, request, context, self.gate, "GetExecution")

    async def CancelExecution(self, request: Any, context: Any) -> Any:
        return await _call(
            self.api.cancel_execution, request, context, self.gate, "CancelExecution"
        )

    async def ListExecutions(self, request: Any, context: Any) -> Any:
        return await _call(self.api.list_executions, request, context, self.gate, "ListExecutions")

    async def ListDeadLetters(self, request: Any, context: Any) -> Any:
        return await _call(
            self.api.list_dead_letters, request, context, self.gate, "ListDeadLetters"
        )

    async def RedriveDeadLetters(self, request: Any, context: Any) -> Any:
        return await _call(self.api.redrive, request, context, self.gate, "RedriveDeadLetters")

    async def GetClusterStatus(self, request: Any, context: Any) -> Any:
        return await _call(self.api.cluster_status, request, context, self.gate, "GetClusterStatus")

    async def SetTenantLimits(self, request: Any, context: Any) -> Any:
        return await _call(
            self.api.set_tenant_limits, request, context, self.gate, "SetTenantLimits"
        )

    async def GetTenantLimits(self, request: Any, context: Any) -> Any:
        return await _call(
            self.api.get_tenant_limits, request, context, self.gate, "GetTenantLimits"
        )

    async def ListTenantLimits(self, request: Any, context: Any) -> Any:
        return await _call(
            self.api.list_tenant_limits, request, context, self.gate, "ListTenantLimits"
        )

    async def DeleteTenantLimits(self, request: Any, context: Any) -> Any:
        return await _call(
            self.api.delete_tenant_limits, request, context, self.gate, "DeleteTenantLimits"
        )

    async def CreateToken(self, request: Any, context: Any) -> Any:
        return await _call(self.api.create_token, request, context, self.gate, "CreateToken")

    async def ListTokens(self, request: Any, context: Any) -> Any:
        return await _call(self.api.list_tokens, request, context, self.gate, "ListTokens")

    async def RevokeToken(self, request: Any, context: Any) -> Any:
        return await _call(self.api.revoke_token, request, context, self.gate, "RevokeToken")

    async def WhoAmI(self, request: Any, context: Any) -> Any:
        return await _call(self.api.who_am_i, request, context, self.gate, "WhoAmI")

    async def ListAudit(self, request: Any, context: Any) -> Any:
        return await _call(self.api.list_audit, request, context, self.gate, "ListAudit")

    async def ListQueues(self, request: Any, context: Any) -> Any:
        return await _call(self.api.list_queues, request, context, self.gate, "ListQueues")


class PeerServicer(peer_pb2_grpc.PeerServicer):
    """The internal node-to-node service: a thin adapter over :class:`PeerAnswers`."""

    def __init__(self, answers: PeerAnswers, secret: str | None = None) -> None:
        self.answers = answers
        #: With auth on, the cluster's peer secret every call must present.
        self.secret = secret

    async def _peer_call(
        self, fn: Callable[[Req], Awaitable[Resp]], request: Req, context: Any
    ) -> Resp:
        if self.secret is not None:
            try:
                check_peer(self.secret, metadata_value(context, PEER_METADATA))
            except SchedError as err:
                await abort_with(context, err)
        return await _call(fn, request, context)

    async def ListLocalExecutions(self, request: Any, context: Any) -> Any:
        return await self._peer_call(self.answers.list_local, request, context)

    async def GetLocalExecution(self, request: Any, context: Any) -> Any:
        return await self._peer_call(self.answers.get_local, request, context)

    async def GetLocalStatus(self, request: Any, context: Any) -> Any:
        return await self._peer_call(self.answers.status_local, request, context)

    async def GetLocalQueues(self, request: Any, context: Any) -> Any:
        return await self._peer_call(self.answers.queues_local, request, context)

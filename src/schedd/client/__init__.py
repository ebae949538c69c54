"""The client SDK: :class:`Client` (blocking) and :class:`AsyncClient` (asyncio).

Both take the same arguments and have the same methods; results are the protobuf wire types
(:mod:`schedd.v1`) plus :class:`CreateJobResult` and :class:`BackfillResult`; an execution's
``state`` is a number, which :class:`State` names (``print(State(run.state))``). Errors are
:class:`~schedd.SchedError` subclasses. :func:`job_to_dict` and :func:`execution_to_dict` give
JSON-friendly views for output.
"""

from schedd.client._async import AsyncClient
from schedd.client._channel import IDEMPOTENT_METHODS, ClientTls, grpc_target, service_config
from schedd.client._convert import (
    audit_to_dict,
    cluster_status_to_dict,
    decode_payload,
    encode_payload,
    execution_note,
    execution_to_dict,
    iso_utc,
    job_to_dict,
    missing_nodes_to_dicts,
    parse_time_ms,
    tenant_limits_to_dict,
    to_duration_ms,
    token_to_dict,
    worker_to_dict,
)
from schedd.client._requests import (
    UNSET,
    BackfillResult,
    CreateJobResult,
    ExecutionList,
    build_job,
    build_update,
)
from schedd.client._state import State
from schedd.client._sync import Client

__all__ = [
    "IDEMPOTENT_METHODS",
    "UNSET",
    "AsyncClient",
    "BackfillResult",
    "Client",
    "ClientTls",
    "CreateJobResult",
    "ExecutionList",
    "State",
    "audit_to_dict",
    "build_job",
    "build_update",
    "cluster_status_to_dict",
    "decode_payload",
    "encode_payload",
    "execution_note",
    "execution_to_dict",
    "grpc_target",
    "iso_utc",
    "job_to_dict",
    "missing_nodes_to_dicts",
    "parse_time_ms",
    "service_config",
    "tenant_limits_to_dict",
    "to_duration_ms",
    "token_to_dict",
    "worker_to_dict",
]

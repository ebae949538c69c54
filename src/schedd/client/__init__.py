"""The client SDK: :class:`Client` (blocking) and :class:`AsyncClient` (asyncio).

Both take the same arguments and have the same methods; results are the protobuf wire types
(:mod:`schedd.v1`) plus :class:`CreateJobResult` and :class:`BackfillResult`; an execution's
``state`` is a number, which :class:`State` names (``print(State(run.state))``). Errors are
:class:`~schedd.SchedError` subclasses. :func:`job_to_dict` and :func:`execution_to_dict` give
JSON-friendly views for output.

``__all__`` is the public face. The names imported below it with ``as`` are for schedd's own
packages (``schedctl``, the dashboard): the job document format of ``schedctl apply`` and
``export`` and the fire previews. Other packages import them from here, never from the
underscore modules.
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
    queue_to_dict,
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
    "queue_to_dict",
    "service_config",
    "tenant_limits_to_dict",
    "to_duration_ms",
    "token_to_dict",
    "worker_to_dict",
]

# For schedd's own packages (schedctl, the dashboard), not part of the public face above.
from schedd.client._convert import job_state_word as job_state_word
from schedd.client._fires import dst_notes as dst_notes
from schedd.client._fires import fire_list as fire_list
from schedd.client._fires import lateness_ms as lateness_ms
from schedd.client._fires import next_fires as next_fires
from schedd.client._spec import KIND_JOB as KIND_JOB
from schedd.client._spec import KIND_LIMITS as KIND_LIMITS
from schedd.client._spec import changed_paths as changed_paths
from schedd.client._spec import job_from_dict as job_from_dict
from schedd.client._spec import job_to_spec as job_to_spec
from schedd.client._spec import limits_from_dict as limits_from_dict
from schedd.client._spec import limits_to_spec as limits_to_spec
from schedd.client._spec import payload_is_json as payload_is_json

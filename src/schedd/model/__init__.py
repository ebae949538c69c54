"""Validation and normalisation of jobs: pure functions over the wire types.

The node's API layer calls these before it stores anything::

    job = validate_new_job(request.job, now_ms=clock.now_ms(), id_factory=new_job_id)
    job = apply_update(stored, request.job, request.update_paths, now_ms=clock.now_ms())

Every error is an :class:`~schedd.InvalidArgument` whose ``field`` is a dotted path.
"""

from schedd.model._enums import (
    misfire_name,
    overlap_name,
    parse_misfire,
    parse_overlap,
    parse_state,
    state_name,
    trigger_name,
)
from schedd.model._execution import (
    dispatch_queue,
    execution_from,
    execution_template,
    new_execution,
)
from schedd.model._fields import (
    MAX_ATTEMPTS,
    MAX_CHECKPOINT_BYTES,
    MAX_PAYLOAD_BYTES,
    MAX_TEXT_BYTES,
    check_payload,
    check_text,
    validate_id,
)
from schedd.model._ids import (
    DEFAULT_TENANT,
    TENANT_SEP,
    check_tenant,
    execution_id,
    id_namespace,
    is_generated_id,
    new_job_id,
    parse_execution_id,
    scoped_job_id,
    validate_execution_id,
)
from schedd.model._job import (
    DEFAULT_CATCH_UP_LIMIT,
    DEFAULT_INITIAL_BACKOFF_MS,
    DEFAULT_MAX_ATTEMPTS,
    DEFAULT_MAX_BACKOFF_MS,
    DEFAULT_MULTIPLIER,
    DEFAULT_QUEUE,
    DEFAULT_TIMEOUT_MS,
    DEFAULT_TIMEZONE,
    OUTPUT_FIELDS,
    normalise_spec,
    same_spec,
    validate_new_job,
    validate_new_job_parsed,
)
from schedd.model._tenants import MAX_TENANT_LIMIT, default_burst, validate_tenant_limits
from schedd.model._update import MUTABLE_PATHS, apply_update

__all__ = [
    "DEFAULT_CATCH_UP_LIMIT",
    "DEFAULT_INITIAL_BACKOFF_MS",
    "DEFAULT_MAX_ATTEMPTS",
    "DEFAULT_MAX_BACKOFF_MS",
    "DEFAULT_MULTIPLIER",
    "DEFAULT_QUEUE",
    "DEFAULT_TENANT",
    "DEFAULT_TIMEOUT_MS",
    "DEFAULT_TIMEZONE",
    "MAX_ATTEMPTS",
    "MAX_CHECKPOINT_BYTES",
    "MAX_PAYLOAD_BYTES",
    "MAX_TENANT_LIMIT",
    "MAX_TEXT_BYTES",
    "MUTABLE_PATHS",
    "OUTPUT_FIELDS",
    "TENANT_SEP",
    "apply_update",
    "check_payload",
    "check_tenant",
    "check_text",
    "default_burst",
    "dispatch_queue",
    "execution_from",
    "execution_id",
    "execution_template",
    "id_namespace",
    "is_generated_id",
    "misfire_name",
    "new_execution",
    "new_job_id",
    "normalise_spec",
    "overlap_name",
    "parse_execution_id",
    "parse_misfire",
    "parse_overlap",
    "parse_state",
    "same_spec",
    "scoped_job_id",
    "state_name",
    "trigger_name",
    "validate_execution_id",
    "validate_id",
    "validate_new_job",
    "validate_new_job_parsed",
    "validate_tenant_limits",
]

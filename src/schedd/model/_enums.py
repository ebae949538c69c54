"""Enum names without their prefixes, both ways: ``EXECUTION_SUCCEEDED`` <-> ``"SUCCEEDED"``."""

from __future__ import annotations

from google.protobuf.descriptor import EnumDescriptor

from schedd._errors import InvalidArgument
from schedd.v1 import execution_pb2, job_pb2

_STATE = execution_pb2.DESCRIPTOR.enum_types_by_name["ExecutionState"]
_TRIGGER = execution_pb2.DESCRIPTOR.enum_types_by_name["Trigger"]
_MISFIRE = job_pb2.DESCRIPTOR.enum_types_by_name["MisfireMode"]
_OVERLAP = job_pb2.DESCRIPTOR.enum_types_by_name["OverlapPolicy"]

_PREFIXES: dict[str, tuple[str, ...]] = {
    "ExecutionState": ("EXECUTION_STATE_", "EXECUTION_"),
    "Trigger": ("TRIGGER_",),
    "MisfireMode": ("MISFIRE_MODE_", "MISFIRE_"),
    "OverlapPolicy": ("OVERLAP_POLICY_", "OVERLAP_"),
}


def _short(enum: EnumDescriptor, value: int) -> str:
    found = enum.values_by_number.get(value)
    if found is None:
        return str(value)
    full = found.name
    for prefix in _PREFIXES[enum.name]:
        if full.startswith(prefix):
            return full[len(prefix) :]
    return full  # pragma: no cover


def _parse(enum: EnumDescriptor, field: str, text: str) -> int:
    wanted = text.strip().upper().replace("-", "_")
    names = {_short(enum, v.number): v.number for v in enum.values if v.number != 0}
    if wanted in names:
        return names[wanted]
    choices = ", ".join(n.lower() for n in names)
    raise InvalidArgument(field, f"unknown value {text!r} (choose from {choices})")


def state_name(state: int) -> str:
    """``EXECUTION_SUCCEEDED`` -> ``"SUCCEEDED"`` (unknown numbers as digits)."""
    return _short(_STATE, state)


def parse_state(text: str, field: str = "state") -> int:
    """``"succeeded"`` -> ``EXECUTION_SUCCEEDED``; InvalidArgument when unknown."""
    return _parse(_STATE, field, text)


def trigger_name(trigger: int) -> str:
    """``TRIGGER_MANUAL`` -> ``"MANUAL"``."""
    return _short(_TRIGGER, trigger)


def misfire_name(mode: int) -> str:
    """``MISFIRE_CATCH_UP`` -> ``"CATCH_UP"``."""
    return _short(_MISFIRE, mode)


def parse_misfire(text: str, field: str = "misfire") -> int:
    """``"catch_up"`` -> ``MISFIRE_CATCH_UP``; InvalidArgument when unknown."""
    return _parse(_MISFIRE, field, text)


def overlap_name(policy: int) -> str:
    """``OVERLAP_BUFFER_ONE`` -> ``"BUFFER_ONE"``."""
    return _short(_OVERLAP, policy)


def parse_overlap(text: str, field: str = "overlap") -> int:
    """``"forbid"`` -> ``OVERLAP_FORBID``; InvalidArgument when unknown."""
    return _parse(_OVERLAP, field, text)

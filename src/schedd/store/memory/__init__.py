"""The in-memory backend of the store contract, with etcd's semantics, for simulation tests."""

from schedd.store.memory._kv import FaultPlan, MemoryKV

__all__ = ["FaultPlan", "MemoryKV"]

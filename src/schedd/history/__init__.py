"""Run history: finished executions in a local RocksDB with a retention TTL."""

from schedd.history._rocks import History

__all__ = ["History"]

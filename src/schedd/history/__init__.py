"""Run history: finished executions in a local RocksDB with a retention TTL, pruned on a timer."""

from schedd.history._order import Position, comes_after, list_order
from schedd.history._pruner import HistoryPruner
from schedd.history._rocks import History

__all__ = ["History", "HistoryPruner", "Position", "comes_after", "list_order"]

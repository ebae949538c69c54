"""The scheduler node: partitions, the timer wheel, dispatch and the client API."""

from schedd.node._config import NodeConfig
from schedd.node._node import Node

__all__ = ["Node", "NodeConfig"]

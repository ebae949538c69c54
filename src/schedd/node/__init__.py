"""The scheduler node: partitions, the timer wheel, dispatch and the client API.

``__all__`` is the public face. The names imported below it with ``as`` are for schedd's own
packages: the roles ``schedd.testing`` runs one node's partitions with, on virtual time (the
client API, the partition, the fire policy, the result router, the notify watcher).
"""

from schedd.node._config import NodeConfig
from schedd.node._node import Node, NodeSurface

__all__ = ["Node", "NodeConfig", "NodeSurface"]

# For schedd's own packages (testing), not part of the public face above.
from schedd.node._api import NodeApi as NodeApi
from schedd.node._fire_policy import FirePolicy as FirePolicy
from schedd.node._live import OwnedPartitions as OwnedPartitions
from schedd.node._notify import NotifyWatcher as NotifyWatcher
from schedd.node._partition import Partition as Partition
from schedd.node._settling import ResultRouter as ResultRouter

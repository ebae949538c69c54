"""`schedd dev`: a whole local cluster (etcd, a node, a demo worker) in one command."""

from schedd.dev._cluster import run_dev
from schedd.dev._etcd_process import EtcdCluster, EtcdProcess, free_port, port_is_free

__all__ = ["EtcdCluster", "EtcdProcess", "free_port", "port_is_free", "run_dev"]

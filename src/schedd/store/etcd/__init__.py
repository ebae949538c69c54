"""The etcd backend of the store contract: everything that knows etcd lives in this folder."""

from schedd.store.etcd._client import EtcdConfig, EtcdKV, EtcdTxnResult, connect_etcd
from schedd.store.etcd._wire import EtcdOps

__all__ = ["EtcdConfig", "EtcdKV", "EtcdOps", "EtcdTxnResult", "connect_etcd"]

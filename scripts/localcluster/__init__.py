"""The local cluster behind ``scripts/cluster-up``, ``cluster-down`` and ``cluster-status``.

3 etcd members, 3 ``schedd node`` and 2 ``schedd worker`` processes on loopback, configured by
``cluster/local.ini`` (overridable through ``SCHEDD_CLUSTER_*`` variables), each process in the
background with its pid file and log under the cluster directory. Run it with the repository's
``.venv`` python: ``python -m localcluster up|down|status`` with ``scripts/`` on the path.
"""

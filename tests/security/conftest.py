"""Certificates for the security tests, made by the dev CA (scripts/dev-ca's code): the
cluster's own, and a foreign one (another CA with the same file names) for certificates the
nodes must refuse."""

from __future__ import annotations

from pathlib import Path

import pytest

from schedd.dev._ca import make_dev_ca


@pytest.fixture(scope="session")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The cluster's CA and certificates (ca.pem, node.pem, worker.pem, client.pem...)."""
    d = tmp_path_factory.mktemp("pki")
    make_dev_ca(d, ["node.test"])
    return d


@pytest.fixture(scope="session")
def foreign(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Another CA's certificates: valid, and signed by a CA the cluster does not trust."""
    d = tmp_path_factory.mktemp("foreign")
    make_dev_ca(d)
    return d

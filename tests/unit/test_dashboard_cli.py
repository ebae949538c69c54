"""The dashboard's flags on `schedd node` and `schedd dev`, and a taken port."""

from __future__ import annotations

import socket
from types import SimpleNamespace

import pytest
from click.testing import CliRunner

from schedd._errors import Unavailable
from schedd.cli.schedd_main import main
from schedd.dashboard import DashboardServer


def test_node_and_dev_take_http_listen_and_actions() -> None:
    runner = CliRunner()
    node_help = runner.invoke(main, ["node", "--help"]).output
    assert "--http-listen" in node_help and "--http-actions" in node_help
    assert "(default: off)" in node_help
    dev_help = runner.invoke(main, ["dev", "--help"]).output
    assert "--http-listen" in dev_help and "127.0.0.1:8080" in dev_help


def test_http_listen_must_be_host_port() -> None:
    result = CliRunner().invoke(main, ["node", "--http-listen", "nowhere"])
    assert result.exit_code == 2
    assert "--http-listen" in result.output and "HOST:PORT" in result.output


async def test_a_taken_port_is_a_clear_error() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        node = SimpleNamespace(auth=False)
        server = DashboardServer(node, f"127.0.0.1:{port}")  # type: ignore[arg-type]
        with pytest.raises(Unavailable, match="cannot listen"):
            await server.start()

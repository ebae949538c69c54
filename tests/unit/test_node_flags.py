"""schedd node: a bad tuning flag is one readable error naming it, before anything starts."""

from __future__ import annotations

from click.testing import CliRunner

from schedd.cli.schedd_main import main


def test_a_negative_dispatch_backlog_is_refused_naming_the_flag() -> None:
    result = CliRunner().invoke(main, ["node", "--max-dispatch-backlog", "-1"])
    assert result.exit_code == 2
    assert "--max-dispatch-backlog" in result.output
    assert "--max-write-txns" in result.output


def test_a_negative_write_bound_is_refused_naming_the_flag() -> None:
    result = CliRunner().invoke(main, ["node", "--max-write-txns", "-2"])
    assert result.exit_code == 2
    assert "--max-write-txns" in result.output
    assert "Traceback" not in result.output


def test_the_dispatch_backlog_flag_is_documented_in_help() -> None:
    result = CliRunner().invoke(main, ["node", "--help"])
    assert result.exit_code == 0
    assert "--max-dispatch-backlog" in result.output

"""schedd node: a bad tuning flag is one readable error naming it, before anything starts."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from schedd.cli.schedd_main import main


@pytest.mark.parametrize(
    ("flag", "value"), [("--max-dispatch-backlog", "-1"), ("--max-write-txns", "-2")]
)
def test_a_negative_bound_is_refused_naming_the_flag(flag: str, value: str) -> None:
    result = CliRunner().invoke(main, ["node", flag, value])
    assert result.exit_code == 2
    assert flag in result.output
    assert "Traceback" not in result.output


def test_the_bounds_are_documented_in_help() -> None:
    result = CliRunner().invoke(main, ["node", "--help"])
    assert result.exit_code == 0
    assert "--max-dispatch-backlog" in result.output
    assert "--max-write-txns" in result.output

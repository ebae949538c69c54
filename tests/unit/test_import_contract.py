"""The import contract (``[tool.importlinter]`` in pyproject.toml) holds: the package layers,
the SDKs apart from the node, the node apart from the dashboard, and no package reaching into
another's underscore modules.

It runs ``lint-imports`` on the ``schedd`` this test imports (grimp finds the package through
the import system, so the child gets the same ``sys.path`` entry), from the repository root
where pyproject.toml is.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import schedd

ROOT = Path(__file__).resolve().parents[2]
#: ``lint-imports`` itself: importlinter.cli has no ``__main__``, so call its entry point.
LINT_IMPORTS = (
    "import sys; from importlinter.cli import lint_imports_command; "
    "sys.exit(lint_imports_command())"
)


def test_the_import_contract_is_kept() -> None:
    src = str(Path(schedd.__file__).resolve().parents[1])
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (src, env.get("PYTHONPATH", "")) if p)
    proc = subprocess.run(
        [sys.executable, "-c", LINT_IMPORTS, "--no-cache", "--config", "pyproject.toml"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, f"lint-imports failed:\n{proc.stdout}\n{proc.stderr}"

"""Size is a design signal (STYLE.md, principle 9): modules up to 500 lines, functions and
methods up to 60 (``end_lineno - lineno + 1``: from ``def`` to the last line, decorators not
counted). Generated protobuf modules are not ours to size.

``PENDING`` lists today's offenders that are being split by their owners, each with its size
now as a ceiling: the test fails when one grows, and when one is already within the limits
(remove it from the list then), so the list only shrinks, to empty.
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src" / "schedd"
MAX_MODULE_LINES = 500
MAX_FUNCTION_LINES = 60

#: path under src/schedd (a module) or path::qualified.name (a function) -> today's lines.
PENDING: dict[str, int] = {}


def _functions(tree: ast.AST, prefix: str = "") -> list[tuple[str, int]]:
    """(qualified name, lines) of every function and method, nested ones included."""
    found: list[tuple[str, int]] = []
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            name = prefix + node.name
            found.append((name, (node.end_lineno or node.lineno) - node.lineno + 1))
            found += _functions(node, name + ".")
        elif isinstance(node, ast.ClassDef):
            found += _functions(node, prefix + node.name + ".")
        else:
            found += _functions(node, prefix)
    return found


def _sizes() -> dict[str, tuple[int, int]]:
    """Every module's and every function's size: name -> (lines, limit)."""
    sizes: dict[str, tuple[int, int]] = {}
    for path in sorted(SRC.rglob("*.py")):
        if "_pb2" in path.name:
            continue
        rel = path.relative_to(SRC).as_posix()
        text = path.read_text(encoding="utf-8")
        sizes[rel] = (len(text.splitlines()), MAX_MODULE_LINES)
        for name, lines in _functions(ast.parse(text, filename=str(path))):
            sizes[f"{rel}::{name}"] = (lines, MAX_FUNCTION_LINES)
    return sizes


def _describe(name: str, lines: int, limit: int) -> str:
    if "::" in name:
        path, func = name.split("::")
        return f"{path}: function {func} is {lines} lines (limit {limit})"
    return f"{name}: module is {lines} lines (limit {limit})"


def test_modules_and_functions_stay_within_their_size() -> None:
    sizes = _sizes()
    over = [
        _describe(name, lines, limit)
        for name, (lines, limit) in sizes.items()
        if lines > limit and name not in PENDING
    ]
    assert not over, "split by responsibility:\n" + "\n".join(over)


def test_pending_offenders_do_not_grow_and_leave_the_list_once_fixed() -> None:
    sizes = _sizes()
    wrong: list[str] = []
    for name, ceiling in PENDING.items():
        if name not in sizes:
            wrong.append(f"{name}: gone (renamed or split): remove it from PENDING")
            continue
        lines, limit = sizes[name]
        if lines <= limit:
            wrong.append(f"{name}: {lines} lines, within the limit now: remove it from PENDING")
        elif lines > ceiling:
            wrong.append(_describe(name, lines, limit) + f", grew past its ceiling {ceiling}")
    assert not wrong, "\n".join(wrong)

"""Every function of the package is short enough to read at once: no more than 60 lines from its `def`
to the last line of its body (docstring included, decorators not)."""

from __future__ import annotations

import ast
from pathlib import Path

import hpcbundle

PACKAGE = Path(hpcbundle.__file__).parent
MAX_LINES = 60


def long_functions(root: Path, limit: int = MAX_LINES) -> list[str]:
    """'path:line name (N lines)' for every function or method below `root` longer than `limit` lines,
    nested ones included."""
    found = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > limit:
                    found.append(f"{path.relative_to(root)}:{node.lineno} {node.name} ({lines} lines)")
    return found


def test_long_functions_counts_from_the_def_line_to_the_last_line_of_the_body(tmp_path):
    body = "\n".join(f"    x{i} = {i}" for i in range(58))
    (tmp_path / "m.py").write_text(
        f'@decorator\ndef fits():\n    """Doc."""\n{body}\n\n\nclass C:\n    def over(self):\n        """Doc."""\n'
        + body.replace("    ", "        ")
        + "\n        return 1\n"
    )
    assert long_functions(tmp_path) == ["m.py:65 over (61 lines)"]


def test_no_function_in_the_package_is_over_60_lines():
    assert long_functions(PACKAGE) == []

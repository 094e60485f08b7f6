"""No function or method under ``src/`` is longer than 100 lines (its ``def`` to its last line, docstring
included): a longer one is split along its steps. Read from the source with :mod:`ast` (nothing is imported)."""
from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src"

#: The longest a function may be [lines].
MAX_LINES = 100


def _long_functions(root: Path) -> list[str]:
    found = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_LINES:
                    found.append(f"{path.relative_to(root)}:{node.lineno} {node.name} ({lines} lines)")
    return found


def test_no_function_under_src_is_longer_than_100_lines():
    assert _long_functions(SRC) == []


def test_the_check_counts_from_the_def_to_the_last_line(tmp_path):
    def body(n: int, indent: str) -> str:
        return "\n".join(f"{indent}x{i} = {i}" for i in range(n))

    (tmp_path / "ok.py").write_text(f"def fits():\n{body(MAX_LINES - 1, '    ')}\n")
    assert _long_functions(tmp_path) == []
    (tmp_path / "long.py").write_text(f"class C:\n    def method(self):\n{body(MAX_LINES, '        ')}\n")
    assert _long_functions(tmp_path) == [f"long.py:2 method ({MAX_LINES + 1} lines)"]

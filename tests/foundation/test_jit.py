"""retarget.jit: a cached kernel is recompiled when a module it imports changes (numba alone keys the cache on the
kernel's own file), and every cached kernel of retarget goes through it."""
from __future__ import annotations

import ast
import importlib
import sys
from pathlib import Path

import numba
import pytest

from retarget import jit

SRC = Path(jit.__file__).resolve().parent

LEAF = """
import numba

OFFSET = {offset}


@numba.njit(cache=True)
def leaf(x):
    return x + OFFSET
"""

TOP = """
import numba

from {package}.leaf import leaf


@numba.njit(cache=True)
def top(x):
    return 2.0 * leaf(x)
"""


def _import_top(package: str) -> object:
    for name in [m for m in sys.modules if m == package or m.startswith(package + ".")]:
        del sys.modules[name]
    importlib.invalidate_caches()
    return importlib.import_module(f"{package}.top").top


@pytest.fixture
def kernel_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[str, Path]:
    """A package of two cached kernels in ``tmp_path`` (``top`` calls ``leaf`` of another module), with
    retarget.jit's locators pointed at it instead of at retarget."""
    package = f"jitcheck_{tmp_path.name.replace('-', '_')}"
    root = tmp_path / package
    root.mkdir()
    (root / "__init__.py").write_text("")
    (root / "leaf.py").write_text(LEAF.format(offset=1.0))
    (root / "top.py").write_text(TOP.format(package=package))
    impl = jit._numba("CacheImpl")
    locators = [type(f"Check{cls.__name__}", (cls,), {"package": package, "root": root.resolve()})
                for cls in (jit.UserDirLocator, jit.InTreeLocator, jit.UserWideLocator)]
    monkeypatch.setattr(impl, "_locator_classes", [*locators, *impl._locator_classes])
    monkeypatch.syspath_prepend(str(tmp_path))
    yield package, root
    for name in [m for m in sys.modules if m.startswith(package)]:
        del sys.modules[name]


def test_a_cached_kernel_recompiles_when_a_kernel_it_calls_changes(kernel_package: tuple[str, Path]) -> None:
    package, root = kernel_package
    assert _import_top(package)(1.0) == 4.0
    again = _import_top(package)
    assert again(1.0) == 4.0
    assert sum(again.stats.cache_hits.values()) == 1, "an unchanged package loads its kernels from the cache"

    (root / "leaf.py").write_text(LEAF.format(offset=100.0))  # only the callee's module changes
    changed = _import_top(package)
    assert changed(1.0) == 202.0, "numba's own locator would give 4.0: the old leaf linked into the cached top"
    assert sum(changed.stats.cache_hits.values()) == 0


def test_a_cached_kernel_is_kept_when_an_unrelated_module_changes(kernel_package: tuple[str, Path]) -> None:
    package, root = kernel_package
    assert _import_top(package)(1.0) == 4.0
    (root / "other.py").write_text("X = 1\n")
    (root / "__init__.py").write_text("# the package's own file, not imported by name from top.py\n")
    kept = _import_top(package)
    assert kept(1.0) == 4.0
    assert sum(kept.stats.cache_hits.values()) == 1


def test_dependencies_follow_module_level_imports_transitively(tmp_path: Path) -> None:
    root = tmp_path / "pkg"
    (root / "sub").mkdir(parents=True)
    for f in ("__init__.py", "sub/__init__.py"):
        (root / f).write_text("")
    (root / "a.py").write_text("from pkg.sub import b\nimport numpy\n\ndef f():\n    from pkg import d\n")
    (root / "sub" / "b.py").write_text("from . import c\ntry:\n    from ..e import X\nexcept ImportError:\n    pass\n")
    (root / "sub" / "c.py").write_text("")
    (root / "d.py").write_text("")
    (root / "e.py").write_text("X = 1\n")
    names = [p.relative_to(root).as_posix() for p in jit.dependencies(root / "a.py", "pkg", root.resolve())]
    # d is imported inside a function only (run time, after the kernels are compiled); numpy is outside the package
    assert names == ["e.py", "sub/__init__.py", "sub/b.py", "sub/c.py"]


def test_the_compiled_engine_s_stamp_covers_the_kernels_it_links() -> None:
    deps = {p.relative_to(SRC).as_posix() for p in jit.dependencies(SRC / "sim" / "reduced" / "compiled.py")}
    assert {"sim/reduced/kernels.py", "sim/reduced/cubature.py", "sim/reduced/dynamics.py", "sim/servo.py",
            "sim/rotation_kernels.py", "sim/joint_kernels.py", "fem/neo_hookean.py"} <= deps
    assert not any(d.startswith(("ros/", "planning/", "optimize/")) for d in deps)


def _cached_numba_decorators(path: Path) -> list[int]:
    """Lines of ``path`` that call ``numba.njit``/``numba.jit`` (or a bare ``njit``/``jit`` imported from numba)
    with ``cache=True``."""
    tree = ast.parse(path.read_text(), filename=str(path))
    from_numba = {a.asname or a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module == "numba"
                  for a in n.names}
    lines = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or not any(
                k.arg == "cache" and isinstance(k.value, ast.Constant) and k.value.value is True
                for k in node.keywords):
            continue
        f = node.func
        numba_attr = isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id == "numba"
        if numba_attr or (isinstance(f, ast.Name) and f.id in from_numba):
            lines.append(node.lineno)
    return lines


def test_every_cached_kernel_of_retarget_takes_njit_from_retarget_jit() -> None:
    offenders = [f"{p.relative_to(SRC)}:{line}" for p in sorted(SRC.rglob("*.py")) if p.name != "jit.py"
                 for line in _cached_numba_decorators(p)]
    assert not offenders, ("cache=True on numba's own njit: use `from retarget.jit import njit` so the cache follows "
                           f"the modules the kernel imports: {offenders}")
    assert jit.njit is numba.njit

"""numba's ``njit`` for retarget's kernels, with an on-disk cache that is never older than the code it was compiled
from (docs/testing.md, "numba's compile").

numba keys a cached kernel on its own source file only: a kernel that calls a kernel of another module keeps the
machine code it linked in, when that module changes, until its own file changes (numba's documented limitation,
"changes in symbols defined in another file are not detected"). A ``git pull`` that edits ``sim/reduced/kernels.py``
but not ``sim/reduced/compiled.py`` would leave the compiled engine running the old constraint rows.

Importing this module puts :class:`DependencyLocator` first among numba's cache locators for files under
``src/retarget``: the stamp of a kernel's cache is the content of its file and of every retarget module that file
imports at module level, transitively (the kernels it calls and the constants it reads can only come from those).
A change to any of them recompiles the kernel; an edit elsewhere (a node, the CLI) does not. Where the cache lives
is numba's choice as before (``__pycache__`` beside the source, or ``NUMBA_CACHE_DIR``).

Every module of retarget that caches a kernel takes ``njit`` from here (tests/foundation/test_jit.py checks it).
"""
from __future__ import annotations

import ast
import functools
import hashlib
import os
from pathlib import Path

import numba
from numba.core import caching

__all__ = ["DependencyLocator", "dependencies", "install", "njit"]

#: The package whose kernels the locator stamps: its import name and its folder.
PACKAGE = "retarget"
ROOT = Path(__file__).resolve().parent


@functools.lru_cache(maxsize=None)
def _digest(path: str, mtime_ns: int, size: int) -> bytes:
    """sha256 of a file's bytes (memoized on its modification time and size, so an edit is read again)."""
    return hashlib.sha256(Path(path).read_bytes()).digest()


def _module_file(name: str, package: str, root: Path) -> Path | None:
    """The source file of module ``name`` of ``package`` (rooted at ``root``), None outside it or if absent."""
    parts = name.split(".")
    if parts[0] != package:
        return None
    base = root.joinpath(*parts[1:])
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


@functools.lru_cache(maxsize=None)
def _module_imports(path: Path, mtime_ns: int, package: str, root: Path) -> frozenset[Path]:
    """The files of ``package`` that ``path`` imports at module level (in its body, under ``if`` and ``try``; not
    inside functions or classes)."""
    tree = ast.parse(path.read_bytes(), filename=str(path))
    rel = path.relative_to(root).with_suffix("").parts
    own_package = [package, *rel[:-1]]  # a package's __init__ and a module resolve relative imports alike
    found: set[Path] = set()

    def add(name: str) -> None:
        if (f := _module_file(name, package, root)) is not None:
            found.add(f)

    def visit(statements: list[ast.stmt]) -> None:
        for s in statements:
            if isinstance(s, ast.Import):
                for alias in s.names:
                    add(alias.name)
            elif isinstance(s, ast.ImportFrom):
                base = s.module or ""
                if s.level:
                    prefix = own_package[: len(own_package) - (s.level - 1)]
                    base = ".".join([*prefix, base] if base else prefix)
                add(base)
                for alias in s.names:  # ``from pkg import module`` names a module, not an attribute
                    add(f"{base}.{alias.name}")
            elif isinstance(s, ast.If):
                visit(s.body)
                visit(s.orelse)
            elif isinstance(s, ast.Try):
                visit(s.body)
                visit(s.orelse)
                visit(s.finalbody)
                for handler in s.handlers:
                    visit(handler.body)

    visit(tree.body)
    found.discard(path)
    return frozenset(found)


def dependencies(path: Path, package: str = PACKAGE, root: Path = ROOT) -> list[Path]:
    """The files of ``package`` that ``path`` imports at module level, transitively, sorted (``path`` not among
    them)."""
    path = Path(path).resolve()
    seen: set[Path] = set()
    todo = [path]
    while todo:
        current = todo.pop()
        for f in _module_imports(current, current.stat().st_mtime_ns, package, root):
            if f not in seen and f != path:
                seen.add(f)
                todo.append(f)
    return sorted(seen)


def source_stamp(path: Path, package: str = PACKAGE, root: Path = ROOT) -> tuple[tuple[str, bytes], ...]:
    """The content digests of ``path`` and of its :func:`dependencies`, each with its path under ``root``."""
    stamp = []
    for f in [Path(path).resolve(), *dependencies(path, package, root)]:
        st = f.stat()
        stamp.append((f.relative_to(root).as_posix(), _digest(str(f), st.st_mtime_ns, st.st_size)))
    return tuple(stamp)


class DependencyLocator:
    """Mixin over a numba cache locator: the source stamp covers the kernel's file and its module-level imports of
    :attr:`package` (:func:`source_stamp`); functions outside :attr:`root` are left to numba's own locators."""

    package: str = PACKAGE
    root: Path = ROOT

    def get_source_stamp(self) -> object:
        return source_stamp(Path(self._py_file), self.package, self.root)

    @classmethod
    def from_function(cls, py_func: object, py_file: str) -> object:
        try:
            Path(py_file).resolve().relative_to(cls.root)
        except ValueError:
            return None
        return super().from_function(py_func, py_file)  # type: ignore[misc]


def _numba(name: str) -> type:
    """A class of numba's caching module by its current name or its older one (a leading underscore)."""
    return getattr(caching, name, None) or getattr(caching, "_" + name)


class UserDirLocator(DependencyLocator, _numba("UserProvidedCacheLocator")):
    """Under ``NUMBA_CACHE_DIR`` when it is set, as numba's first choice."""


class InTreeLocator(DependencyLocator, _numba("InTreeCacheLocator")):
    """``__pycache__`` beside the source, numba's default."""


class UserWideLocator(DependencyLocator, _numba("UserWideCacheLocator")):
    """The user's cache folder when ``__pycache__`` is not writable (an installed, read-only package)."""


def install(*locators: type) -> None:
    """Put ``locators`` (default: retarget's three, in numba's order) first among numba's cache locators, once;
    numba asks them in order and takes the first that accepts a function."""
    chosen = list(locators or (UserDirLocator, InTreeLocator, UserWideLocator))
    classes = _numba("CacheImpl")._locator_classes
    for cls in reversed(chosen):
        if cls not in classes:
            classes.insert(0, cls)


install()

#: numba's ``njit``; importing it from here makes a ``cache=True`` kernel's cache follow its dependencies.
njit = numba.njit

if os.environ.get("NUMBA_CACHE_LOCATOR_CLASSES"):  # numba then ignores the list above: say so where it matters
    import warnings

    warnings.warn("NUMBA_CACHE_LOCATOR_CLASSES is set: retarget's kernels' caches do not follow the modules they "
                  "import (retarget/jit.py)", stacklevel=2)

"""Lazy public names for packages (PEP 562): a package lists ``name → submodule`` and imports a submodule only
when one of its names is first used, so ``retarget --help`` and the CLI's start stay free of numba and scipy."""
from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping


def lazy_exports(
    package: str, exports: Mapping[str, str], namespace: dict[str, object]
) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """The module-level ``__getattr__`` and ``__dir__`` of ``package`` (its ``globals()`` is ``namespace``).

    Example (in a package's ``__init__.py``)::

        __getattr__, __dir__ = lazy_exports(__name__, {"load_robot": "loader"}, globals())
    """

    def __getattr__(name: str) -> object:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{package}.{module}"), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(exports))

    return __getattr__, __dir__

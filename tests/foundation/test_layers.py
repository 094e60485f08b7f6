"""The package's import structure, read from the source with :mod:`ast` (nothing is imported):

- the core imports no ROS: no module outside ``retarget.ros`` imports rclpy or a ROS interface package when it is
  imported (its module-level imports, followed through the ``retarget`` modules they import), and only the listed
  modules import one at all (inside functions);
- every package imports only what it builds on (:data:`BUILDS_ON`, followed transitively: the chain model → fem →
  sim → optimize → planning and the packages beside it), at module level and inside functions alike (an import
  inside a function is an edge all the same; only ``if TYPE_CHECKING:`` blocks, which never run, are left out);
  ``ros``, the CLI, ``show`` and the ``commands`` modules sit on top; every package has its place;
- the packages' imports form no cycle (``retarget.<package>`` as one node; ``ros``, the CLI and the ``commands``
  modules, which sit on top, left out);
- no module imports another package's private (``_``-prefixed) names.

Each rule lists today's exceptions explicitly, with the reason, so that it passes now and fails on any new one.
"""
from __future__ import annotations

import ast
import functools
from collections.abc import Iterator
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"

#: Top-level packages of ROS itself: the client library, bag and launch tooling. Interface packages (``*_msgs``,
#: ``*_srvs``, ``*_interfaces`` such as ``retarget_interfaces``) are recognised by their suffix.
ROS_PACKAGES = frozenset({"rclpy", "rosbag2_py", "rosidl_runtime_py", "launch", "launch_ros", "message_filters",
                          "tf2_ros"})

#: Modules outside ``retarget.ros`` that import ROS inside functions (never at import time), and what they import:
#: none (the demo and the JointTrajectory conversion live in ``retarget.ros``).
KNOWN_ROS_IMPORTERS: dict[str, frozenset[str]] = {}

#: What each package builds on directly: it may import these and, transitively, what they build on, never the
#: others (docs/architecture.md, Layers). The chain model → fem → sim → optimize → planning, and beside it the
#: packages that build on parts of it. ``ros``, the CLI, ``show`` and the ``commands`` modules sit on top
#: (:func:`on_top`) and may import anything; the :data:`FOUNDATION` modules anyone.
BUILDS_ON: dict[str, frozenset[str]] = {
    "model": frozenset(),
    "fem": frozenset({"model"}),
    "motion": frozenset({"model"}),
    "control": frozenset({"motion"}),
    "sim": frozenset({"fem", "motion"}),
    "dynamixel": frozenset({"control", "sim"}),
    "twin": frozenset({"dynamixel", "sim"}),
    "mocap": frozenset({"sim", "twin"}),
    "optimize": frozenset({"sim"}),
    "planning": frozenset({"optimize", "mocap"}),
    "fit": frozenset({"optimize", "mocap"}),
    "report": frozenset({"planning"}),
}

#: The top-level modules every package may import (errors, the numba cache, JSON and progress helpers, atomic
#: writes, process handling, the shared command-line argument types); they import only each other.
FOUNDATION = frozenset({"retarget", "retarget.errors", "retarget.jit", "retarget._lazy", "retarget.jsonsafe",
                        "retarget.progress", "retarget.atomic", "retarget.processes", "retarget.cliargs",
                        "retarget.info"})

#: The packages on top, besides the ``commands`` modules.
TOP = frozenset({"ros", "cli", "show"})


#: Imports outside :data:`BUILDS_ON` that exist today: (importer, imported module) → why.
KNOWN_UPWARD_IMPORTS: dict[tuple[str, str], str] = {
    ("retarget.model.loader", "retarget.fem.material"): "load_robot gives each flexible part its material; the loader "
    "belongs beside the FEM it feeds (docs/architecture.md, Layers), a move out of this change's scope",
    ("retarget.model.loader", "retarget.fem.mesh"): "load_robot generates or reads each flexible part's mesh",
    ("retarget.model.loader", "retarget.fem.model_card"): "load_robot calibrates generated meshes' stiffness against "
    "the mesh-converged reference",
}

#: Imports that close a cycle between packages today: (importer, imported module) → why. None since the emulator
#: is given the twin's ``--twin reduced`` (retarget.twin.emulator) instead of importing it.
KNOWN_CYCLE_IMPORTS: dict[tuple[str, str], str] = {}


def is_ros(module: str) -> bool:
    """Whether ``module`` belongs to ROS: a :data:`ROS_PACKAGES` package or an interface package."""
    top = module.split(".")[0]
    return top in ROS_PACKAGES or top.endswith(("_msgs", "_srvs", "_interfaces"))


def modules(src: Path = SRC) -> dict[str, Path]:
    """Every module of ``src/retarget`` by dotted name (a package by its own name)."""
    out = {}
    for path in sorted((src / "retarget").rglob("*.py")):
        parts = list(path.relative_to(src).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _run_anywhere(tree: ast.Module) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import statement that can run: at module level and inside functions and classes, except under
    ``if TYPE_CHECKING:``."""
    pending: list[ast.AST] = [tree]
    while pending:
        node = pending.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        elif isinstance(node, ast.If) and _is_type_checking(node.test):
            pending.extend(node.orelse)
        else:
            pending.extend(ast.iter_child_nodes(node))


def _module_level(tree: ast.Module) -> Iterator[ast.Import | ast.ImportFrom]:
    """The import statements run when the module is imported: top level, also inside top-level ``if`` and ``try``
    blocks, except under ``if TYPE_CHECKING:``."""
    pending: list[ast.stmt] = list(tree.body)
    while pending:
        node = pending.pop(0)
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        elif isinstance(node, ast.If):
            pending.extend(node.orelse if _is_type_checking(node.test) else [*node.body, *node.orelse])
        elif isinstance(node, ast.Try):
            pending.extend([*node.body, *node.orelse, *node.finalbody, *(s for h in node.handlers for s in h.body)])


def _imported(node: ast.Import | ast.ImportFrom, module: str, path: Path) -> list[str]:
    """The modules an import statement names, relative imports resolved (``from a import b``: ``a`` and, when it is
    a module, ``a.b``; callers look names up in :func:`modules`)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if node.level:
        package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
        base = ".".join(package[: len(package) - node.level + 1] + ([node.module] if node.module else []))
    else:
        base = node.module or ""
    return [base, *(f"{base}.{alias.name}" for alias in node.names)]


def imports(module: str, path: Path, module_level: bool, type_checking: bool = True) -> set[str]:
    """The modules ``module`` imports: at module level only, or anywhere in it (``type_checking``: also under
    ``if TYPE_CHECKING:``). Read once per file content and question (every check reads the same files)."""
    stat = path.stat()
    return set(_imports(module, path, stat.st_mtime_ns, stat.st_size, module_level, type_checking))


def tree(path: Path) -> ast.Module:
    """The parsed source of ``path``, parsed once per file content (every check reads the same files)."""
    stat = path.stat()
    return _tree(path, stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=None)
def _tree(path: Path, mtime_ns: int, size: int) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"), str(path))


@functools.lru_cache(maxsize=None)
def _imports(module: str, path: Path, mtime_ns: int, size: int, module_level: bool,
             type_checking: bool) -> frozenset[str]:
    parsed = _tree(path, mtime_ns, size)
    if module_level:
        nodes: Iterator[ast.Import | ast.ImportFrom] = _module_level(parsed)
    elif type_checking:
        nodes = (n for n in ast.walk(parsed) if isinstance(n, (ast.Import, ast.ImportFrom)))
    else:
        nodes = _run_anywhere(parsed)
    return frozenset(name for node in nodes for name in _imported(node, module, path))


def runtime_imports(src: Path = SRC) -> dict[str, set[str]]:
    """Per module: the ``retarget`` modules it imports anywhere it can run (``from a import b`` counts as ``a.b``
    when that is a module, else ``a``; a package imported beside one of its modules is left out)."""
    found = modules(src)
    out = {}
    for name, path in found.items():
        named = {t if t in found else t.rsplit(".", 1)[0] for t in imports(name, path, False, type_checking=False)}
        out[name] = {t for t in named if t in found and not any(o.startswith(t + ".") for o in named)}
    return out


def ros_at_import_time(src: Path = SRC) -> dict[str, set[str]]:
    """Per module outside ``retarget.ros``: the ROS packages importing it imports, following the ``retarget``
    modules it imports at module level (and theirs)."""
    found = modules(src)
    direct = {name: imports(name, path, module_level=True) for name, path in found.items()}
    out: dict[str, set[str]] = {}
    for name in found:
        if name == "retarget.ros" or name.startswith("retarget.ros."):
            continue
        seen, pending, ros = {name}, [name], set()
        while pending:
            for target in direct[pending.pop()]:
                if is_ros(target):
                    ros.add(target.split(".")[0])
                elif target in found:
                    # Importing a.b.c runs a and a.b first.
                    parts = target.split(".")
                    for k in range(1, len(parts) + 1):
                        step = ".".join(parts[:k])
                        if step in found and step not in seen:
                            seen.add(step)
                            pending.append(step)
        if ros:
            out[name] = ros
    return out


def ros_importers(src: Path = SRC) -> dict[str, set[str]]:
    """Per module outside ``retarget.ros``: the ROS packages it imports anywhere (inside functions too)."""
    out: dict[str, set[str]] = {}
    for name, path in modules(src).items():
        if name == "retarget.ros" or name.startswith("retarget.ros."):
            continue
        ros = {target.split(".")[0] for target in imports(name, path, module_level=False) if is_ros(target)}
        if ros:
            out[name] = ros
    return out


def on_top(module: str) -> bool:
    """Whether ``module`` sits on top of every package: the CLI, ``ros`` and each package's ``commands``."""
    parts = module.split(".")
    return module == "retarget.cli" or (len(parts) > 1 and parts[1] == "ros") or parts[-1] == "commands"


def builds_on(package_name: str) -> frozenset[str]:
    """Every package ``package_name`` may import: :data:`BUILDS_ON`, followed transitively."""
    found: set[str] = set()
    pending = list(BUILDS_ON[package_name])
    while pending:
        p = pending.pop()
        if p not in found:
            found.add(p)
            pending.extend(BUILDS_ON[p])
    return frozenset(found)


def upward_imports(src: Path = SRC) -> set[tuple[str, str]]:
    """(importer, imported module) for every import, at module level or inside a function, from a package of
    :data:`BUILDS_ON` of a package it does not build on (a package it is not listed on, or one above it)."""
    out = set()
    for name, named in runtime_imports(src).items():
        own = name.split(".")[1] if name.count(".") else None
        if own not in BUILDS_ON or on_top(name):
            continue
        allowed = builds_on(own) | {own}
        out |= {(name, t) for t in named if t not in FOUNDATION and t.split(".")[1] not in allowed}
    return out


def unplaced(src: Path = SRC) -> set[str]:
    """The packages and top-level modules of ``src/retarget`` in none of :data:`BUILDS_ON`, :data:`TOP` and
    :data:`FOUNDATION`, and the foundation modules that import anything but each other."""
    found = modules(src)
    places = set(BUILDS_ON) | TOP
    out = {".".join(m.split(".")[:2]) for m in found if m not in FOUNDATION and m.split(".")[1:2]
           and m.split(".")[1] not in places}
    named = runtime_imports(src)
    out |= {m for m in FOUNDATION if m in found and not named[m] <= FOUNDATION}
    return out


def package(module: str) -> str:
    """``retarget.<package>`` of a module (a top-level module is its own)."""
    return ".".join(module.split(".")[:2])


def package_cycles(src: Path = SRC, allowed: frozenset[tuple[str, str]] = frozenset()) -> list[list[str]]:
    """The cycles between packages (strongly connected components of more than one), from every import that can
    run, the modules on top (:func:`on_top`) and the ``allowed`` (importer, imported) edges left out."""
    graph: dict[str, set[str]] = {}
    for name, named in runtime_imports(src).items():
        if on_top(name):
            continue
        for t in named:
            if package(t) != package(name) and (name, t) not in allowed:
                graph.setdefault(package(name), set()).add(package(t))
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_module_outside_ros_imports_ros_at_import_time():
    found = ros_at_import_time()
    direct = sorted(name for name, path in modules().items() if name in found
                    and any(is_ros(t) for t in imports(name, path, module_level=True)))
    assert found == {}, (f"{len(found)} modules outside retarget.ros import ROS when imported, through {direct}: "
                         "import it inside the function that needs it, or move that code into retarget.ros")


def test_only_the_known_modules_outside_ros_import_ros_at_all():
    found = ros_importers()
    new = {name: ros for name, ros in found.items() if not ros <= KNOWN_ROS_IMPORTERS.get(name, frozenset())}
    assert new == {}, f"ROS imported outside retarget.ros: {new}; move that code into retarget.ros"
    gone = set(KNOWN_ROS_IMPORTERS) - set(found)
    assert not gone, f"{gone} no longer import ROS: remove them from KNOWN_ROS_IMPORTERS"


def private_imports(src: Path = SRC) -> set[tuple[str, str]]:
    """(importer, ``module.name``) for every ``from retarget.x import _name`` of another package's private name."""
    out = set()
    for name, path in modules(src).items():
        for node in ast.walk(tree(path)):
            if (isinstance(node, ast.ImportFrom) and not node.level and (node.module or "").startswith("retarget.")
                    and package(node.module or "") != package(name)):
                out |= {(name, f"{node.module}.{a.name}") for a in node.names if a.name.startswith("_")}
    return out


def test_no_package_imports_another_packages_private_names():
    found = private_imports()
    assert found == set(), f"private names imported across packages: {sorted(found)}; make them public there"


def test_packages_form_no_cycle():
    found = package_cycles(allowed=frozenset(KNOWN_CYCLE_IMPORTS))
    assert found == [], f"cycles between packages: {found}; import at the top of a lower package only"
    imported = {(name, t) for name, named in runtime_imports().items() for t in named}
    gone = set(KNOWN_CYCLE_IMPORTS) - imported
    assert not gone, f"{gone} are gone: remove them from KNOWN_CYCLE_IMPORTS"


def test_packages_import_only_what_they_build_on():
    found = upward_imports()
    new = found - set(KNOWN_UPWARD_IMPORTS)
    assert new == set(), f"imports outside what each package builds on (BUILDS_ON): {sorted(new)}"
    gone = set(KNOWN_UPWARD_IMPORTS) - found
    assert not gone, f"{gone} are gone: remove them from KNOWN_UPWARD_IMPORTS"


def test_every_package_has_a_place():
    assert unplaced() == set(), "place these in BUILDS_ON, TOP or FOUNDATION (tests/foundation/test_layers.py)"


def _package(root: Path, files: dict[str, str]) -> Path:
    """A ``src`` folder with the given ``retarget`` files (relative path → source)."""
    for relative, text in files.items():
        path = root / "src" / "retarget" / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root / "src"


def test_the_checks_see_direct_transitive_lazy_and_relative_imports(tmp_path):
    """The readers on a small package: a ROS import at module level, one reached through another module, one inside
    a function, one under TYPE_CHECKING (not run), a relative upward import, an upward import inside a function,
    one under TYPE_CHECKING (never run), a commands module's (on top), a cycle closed inside a function (whose lower
    side, dynamixel, does not build on twin), a package placed nowhere and a foundation module importing a package."""
    src = _package(tmp_path, {
        "__init__.py": "",
        "model/__init__.py": "",
        "model/robot.py": "from ..sim import system\n",
        "sim/__init__.py": "",
        "sim/system.py": "import numpy\ntry:\n    import rclpy.node\nexcept ImportError:\n    pass\n",
        "fem/__init__.py": "",
        "fem/mesh.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from retarget.optimize import x\n"
                       "def f():\n    from sensor_msgs.msg import JointState\n",
        "fem/material.py": "class M:\n    def f(self):\n        from retarget.sim import system\n",
        "fem/commands.py": "from retarget import optimize\nfrom retarget.motion.io import _private\n",
        "motion/__init__.py": "",
        "motion/io.py": "_private = 1\n",
        "twin/__init__.py": "",
        "twin/servo.py": "from retarget.dynamixel import bus\n",
        "dynamixel/__init__.py": "",
        "dynamixel/bus.py": "def run():\n    from retarget.twin import servo\n",
        "optimize/__init__.py": "",
        "optimize/x.py": "from retarget.model import robot\n",
        "ros/__init__.py": "",
        "ros/node.py": "import rclpy\n",
        "errors.py": "",
        "jsonsafe.py": "def f():\n    from retarget.sim import system\n",
        "gadget/__init__.py": "",
    })
    assert ros_at_import_time(src) == {"retarget.sim.system": {"rclpy"}, "retarget.model.robot": {"rclpy"},
                                       "retarget.optimize.x": {"rclpy"}}
    assert ros_importers(src) == {"retarget.sim.system": {"rclpy"}, "retarget.fem.mesh": {"sensor_msgs"}}
    assert upward_imports(src) == {("retarget.model.robot", "retarget.sim.system"),
                                    ("retarget.fem.material", "retarget.sim.system"),
                                    ("retarget.dynamixel.bus", "retarget.twin.servo")}
    assert unplaced(src) == {"retarget.gadget", "retarget.jsonsafe"}
    assert package_cycles(src) == [["retarget.dynamixel", "retarget.twin"]]
    assert package_cycles(src, frozenset({("retarget.dynamixel.bus", "retarget.twin.servo")})) == []
    assert private_imports(src) == {("retarget.fem.commands", "retarget.motion.io._private")}


@pytest.mark.parametrize(("module", "expected"), [("rclpy.action", True), ("trajectory_msgs.msg", True),
                                                  ("retarget_interfaces.action", True), ("rosbag2_py", True),
                                                  ("numpy", False), ("rosbags.rosbag2", False),
                                                  ("retarget.ros.player", False)])
def test_what_counts_as_ros(module, expected):
    assert is_ros(module) == expected

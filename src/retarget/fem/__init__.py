"""retarget.fem: quadratic-tetrahedron meshes, materials and the Neo-Hookean elastic body.

The simulator uses :class:`ElasticBody` (forces, tangent stiffness, consistent mass, Rayleigh damping,
interface area weights) on a :class:`TetMesh` made by :func:`rod_mesh`/:func:`bar_mesh`/:func:`plate_mesh`
or read with :func:`read_mesh`, with a :class:`Material` from :func:`get_material`. A robot model's fidelity:
:func:`model_card` (bending frequencies vs a mesh-converged reference), :func:`check_fidelity`. See docs/fem.md.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from retarget._lazy import lazy_exports

# Public names → defining module, imported on first access (PEP 562): `retarget --help` and the CLI's start
# import this package without its heavy dependencies.
_EXPORTS: dict[str, str] = {
    "ElasticBody": "elastic",
    "InvertedElementError": "elastic",
    "MATERIALS": "material",
    "Material": "material",
    "get_material": "material",
    "ModelCard": "model_card",
    "ModelFidelityError": "model_card",
    "calibrate_stiffness": "model_card",
    "check_fidelity": "model_card",
    "model_card": "model_card",
    "TetMesh": "mesh",
    "bar_mesh": "mesh",
    "plate_mesh": "mesh",
    "read_mesh": "mesh",
    "rod_mesh": "mesh",
    "write_mesh": "mesh",
}

if TYPE_CHECKING:
    from retarget.fem.elastic import ElasticBody, InvertedElementError
    from retarget.fem.material import MATERIALS, Material, get_material
    from retarget.fem.mesh import TetMesh, bar_mesh, plate_mesh, read_mesh, rod_mesh, write_mesh
    from retarget.fem.model_card import (
        ModelCard,
        ModelFidelityError,
        calibrate_stiffness,
        check_fidelity,
        model_card,
    )


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())


__all__ = [
    "MATERIALS",
    "ElasticBody",
    "InvertedElementError",
    "Material",
    "ModelCard",
    "ModelFidelityError",
    "TetMesh",
    "bar_mesh",
    "calibrate_stiffness",
    "check_fidelity",
    "get_material",
    "model_card",
    "plate_mesh",
    "read_mesh",
    "rod_mesh",
    "write_mesh",
]

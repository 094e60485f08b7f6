"""retarget.fem: quadratic-tetrahedron meshes, materials and the Neo-Hookean elastic body.

The simulator uses :class:`ElasticBody` (forces, tangent stiffness, consistent mass, Rayleigh damping,
interface area weights) on a :class:`TetMesh` made by :func:`rod_mesh`/:func:`bar_mesh`/:func:`plate_mesh`
or read with :func:`read_mesh`, with a :class:`Material` from :func:`get_material`. See docs/fem.md.
"""

from retarget.fem.elastic import ElasticBody, InvertedElementError
from retarget.fem.material import MATERIALS, Material, get_material
from retarget.fem.mesh import TetMesh, bar_mesh, plate_mesh, read_mesh, rod_mesh, write_mesh

__all__ = [
    "MATERIALS",
    "ElasticBody",
    "InvertedElementError",
    "Material",
    "TetMesh",
    "bar_mesh",
    "get_material",
    "plate_mesh",
    "read_mesh",
    "rod_mesh",
    "write_mesh",
]

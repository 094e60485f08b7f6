"""The model card clamps each flexible part at the rigid body the reduced model lets it ride on."""
from __future__ import annotations

import pytest

from retarget.fem.modal import root_interface
from retarget.model import library
from retarget.model.loader import load_robot
from retarget.sim.reduced.system import reference_bodies
from retarget.sim.system import build_system


@pytest.mark.parametrize("robot", ["two_rods", "drummer", "rapper"])
def test_root_interface_is_the_reduced_models_reference_body(robot):
    model = load_robot(library.resolve_robot(robot), mesh_scale=0.1, stiffness_calibration=False)
    system = build_system(model)
    refs = reference_bodies(system)
    for d, part in enumerate(model.flexible_parts):
        assert part.interfaces[root_interface(model, part)].link == system.rigid[refs[d]].name

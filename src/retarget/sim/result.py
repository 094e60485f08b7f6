"""The output of a simulation: time, rigid poses, deformable displacements, constraint forces, and helpers."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
from numpy.typing import ArrayLike, NDArray

from retarget.sim.rotation import rotate, rotation_matrix
from retarget.sim.system import System

__all__ = ["SimulationResult"]


@dataclass(frozen=True, eq=False)
class SimulationResult:
    """Stored samples of a simulation (every ``store_every``-th step, plus the initial state).

    Attributes:
        system: the simulated system.
        time: (n,) [s].
        rigid_poses: (n, b, 7): centre of mass [m] and unit quaternion (w, x, y, z) of each rigid body's rotation
            since the reference configuration (body frame = centre of mass, world-parallel axes at reference).
        displacements: (n, Σ3N) deformable displacements [m] from the rest positions, bodies concatenated in
            system order (float32 when stored compactly).
        constraint_forces: (n, m) the multipliers ``λ`` [N] / [N m] (block order: ``system.constraints``).
        motor_values: (n, n_motors) the commanded ``θ`` [rad] / [m]: the goal of a modelled servo, the angle of an
            ideal motor.
        newton_iterations: (n,) per stored step (0 for the initial state).
        servo_states: (n, size) the modelled servos' coordinates ``[θ…, ι…]`` (``system.servo``; empty columns
            when every motor is ideal).
    """

    system: System
    time: NDArray[np.float64]
    rigid_poses: NDArray[np.float64]
    displacements: NDArray[np.floating]
    constraint_forces: NDArray[np.float64]
    motor_values: NDArray[np.float64]
    newton_iterations: NDArray[np.int64]
    servo_states: NDArray[np.float64] | None = None

    @property
    def shaft_angles(self) -> NDArray[np.float64]:
        """Per motor the shaft angle (n, n_motors) [rad]: the simulated shaft of a modelled servo, the commanded
        angle of an ideal one."""
        out = np.array(self.motor_values, dtype=float, copy=True)
        lay = self.system.servo
        if self.servo_states is not None and lay.n_servos:
            for m, k in enumerate(lay.motor_servo):
                if k >= 0:
                    out[:, m] = self.servo_states[:, k]
        return out

    @property
    def servo_errors(self) -> NDArray[np.float64]:
        """Goal minus shaft per motor (n, n_motors) [rad] (zero for ideal motors)."""
        return self.motor_values - self.shaft_angles

    def body_position(self, name: str) -> NDArray[np.float64]:
        """Centre of mass of rigid body ``name`` over time (n, 3) [m]."""
        return self.rigid_poses[:, self.system.rigid_index(name), :3].copy()

    def body_rotation(self, name: str) -> NDArray[np.float64]:
        """World orientation of the link frame of ``name`` over time (n, 3, 3)."""
        i = self.system.rigid_index(name)
        r = rotation_matrix(self.rigid_poses[:, i, 3:])
        return r @ self.system.rigid[i].frame_rotation

    def point_position(self, name: str, point: ArrayLike) -> NDArray[np.float64]:
        """A point fixed to rigid body ``name``, given in world coordinates at the reference (3,), over time
        (n, 3) [m]."""
        i = self.system.rigid_index(name)
        local = np.asarray(point, dtype=float) - self.system.rigid[i].reference_com
        return self.rigid_poses[:, i, :3] + rotate(self.rigid_poses[:, i, 3:], local)

    def link_origin(self, name: str) -> NDArray[np.float64]:
        """The URDF link frame origin of ``name`` over time (n, 3) [m]."""
        i = self.system.rigid_index(name)
        b = self.system.rigid[i]
        return self.point_position(name, b.reference_com + b.frame_offset)

    def node_positions(self, body: str, nodes: ArrayLike | None = None) -> NDArray[np.float64]:
        """World positions of a deformable body's nodes over time (n, k, 3) [m] (all nodes by default)."""
        d = self.system.deformable_index(body)
        off = self.system.u_offsets[d] - 7 * len(self.system.rigid)
        db = self.system.deformable[d]
        disp = self.displacements[:, off : off + db.n_dofs].reshape(len(self.time), -1, 3).astype(float)
        idx = np.arange(len(db.rest_positions)) if nodes is None else np.asarray(nodes)
        return db.rest_positions[idx][None] + disp[:, idx]

    def save(self, path: str | Path) -> Path:
        """Write an ``.npz`` with the arrays and the body names."""
        path = Path(path)
        np.savez_compressed(
            path,
            time=self.time,
            rigid_poses=self.rigid_poses,
            displacements=self.displacements,
            constraint_forces=self.constraint_forces,
            motor_values=self.motor_values,
            newton_iterations=self.newton_iterations,
            servo_states=np.zeros((len(self.time), 0)) if self.servo_states is None else self.servo_states,
            rigid_names=np.array([b.name for b in self.system.rigid]),
            deformable_names=np.array([b.name for b in self.system.deformable]),
            motor_names=np.array(self.system.motors),
        )
        return path

"""What a plan rests on about the hardware that its model does not hold.

Each assumption about the robot is either modelled or stated: every plan's report lists the ones it rests on
(``assumptions`` in its JSON, the lines ``retarget plan`` prints, the comment lines of its CSV, the planner node's
result, ``retarget goal`` and the demo). The tolerances they cite were measured in the independent servo-beam plant
(docs/servo.md: "How well the servo must be known", "How goals reach the servo"; docs/optimize.md: "Model errors
in an independent plant").
"""
from __future__ import annotations

from collections.abc import Sequence

from retarget.model.robot import RobotModel
from retarget.model.servo import ServoParams

__all__ = ["hardware_assumptions", "ideal_servo_assumption"]


def ideal_servo_assumption(motors: Sequence[str]) -> str:
    """The assumption of a perfect position source on ``motors``."""
    return (f"ideal servo on {', '.join(motors)}: the shafts follow their goals exactly whatever the load (no "
            "position loop, sag or lag modelled)")


def _parts(model: RobotModel) -> str:
    """``rod to link_1, link_2; plate to base``: each flexible part and what it is welded to."""
    return "; ".join(f"{p.name} to {', '.join(i.link or 'the world' for i in p.interfaces)}"
                     for p in model.flexible_parts)


def hardware_assumptions(model: RobotModel, motors: Sequence[str], servos: Sequence[ServoParams]) -> tuple[str, ...]:
    """The hardware assumptions of a plan for ``model`` with ``servos`` (one per motor of ``motors``): one sentence
    each, the servos first."""
    ideal = [n for n, s in zip(motors, servos) if s.ideal]
    modelled = [(n, s) for n, s in zip(motors, servos) if not s.ideal]
    lines = [ideal_servo_assumption(ideal)] if ideal else []
    if modelled:
        lines.append("servo loops as configured: their gains, and the stall torque and no-load speed at the supply "
                     "voltage those were given for (both scale with it, and the loop's stiffness with them: on the single "
                     "rod a plan stayed under 0.1 x naive within 10 % of the loop's gain, docs/servo.md)")
        frictionless = [n for n, s in modelled if not (s.coulomb_friction or s.viscous_friction)]
        where = "" if len(frictionless) == len(modelled) else f" on {', '.join(frictionless)}"
        lines.append("gearboxes without backlash or compliance"
                     + (f", and without friction{where}" if frictionless else "")
                     + "; encoders that read the shaft exactly")
    lines.append("goals that reach the servos continuously and at once: the driver writes each half its period "
                 "ahead, so what is left is the bus's latency, which delays the motion by as much (on the single rod "
                 "the plan kept its shape held at 100 Hz and 10 ms late, docs/servo.md)")
    if model.flexible_parts:
        lines.append(f"flexible parts welded rigidly where they meet their links ({_parts(model)}): no compliance "
                     "at the clamps; every other link rigid")
    else:
        lines.append("every link rigid (no flexible part)")
    lines.append("the links' masses and inertias as the description gives them (on the single rod a tip 10 % off "
                 "left 0.08-0.09 x naive, docs/optimize.md)")
    return tuple(lines)

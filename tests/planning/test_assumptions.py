"""The hardware assumptions a plan's report states (retarget.planning.assumptions): each servo's loop or its ideal
position source, the gearbox, the bus's delivery, the clamps of the flexible parts."""
from __future__ import annotations

from types import SimpleNamespace

from retarget.model.servo import IDEAL, SERVO_MODELS
from retarget.planning.assumptions import hardware_assumptions, ideal_servo_assumption

XM430 = SERVO_MODELS["XM430-W210"]


def _model(*parts: tuple[str, tuple[str | None, ...]]) -> SimpleNamespace:
    return SimpleNamespace(flexible_parts=[
        SimpleNamespace(name=name, interfaces=[SimpleNamespace(link=link) for link in links]) for name, links in parts])


def test_modelled_loops_name_the_voltage_gearbox_bus_and_clamps() -> None:
    lines = hardware_assumptions(_model(("rod", ("arm", None))), ["a", "b"],
                                 [XM430, XM430.with_values(coulomb_friction=0.05)])
    assert len(lines) == 5
    assert lines[0].startswith("servo loops as configured") and "10 %" in lines[0]
    assert "without friction on a;" in lines[1] and "backlash" in lines[1]  # b has friction given
    every = hardware_assumptions(_model(), ["a", "b"], [XM430, XM430])[1]
    assert "without friction;" in every  # no motor has friction: not listed one by one
    assert "half its period ahead" in lines[2] and "latency" in lines[2]
    assert "rod to arm, the world" in lines[3] and "no compliance at the clamps" in lines[3]
    assert lines[4].startswith("the links' masses and inertias as the description gives them")


def test_an_ideal_servo_and_a_rigid_robot() -> None:
    ideal = SERVO_MODELS[IDEAL]
    lines = hardware_assumptions(_model(), ["a", "b"], [ideal, XM430])
    assert lines[0] == ideal_servo_assumption(["a"]) and "ideal servo on a:" in lines[0]
    assert lines[-2] == "every link rigid (no flexible part)"
    only_ideal = hardware_assumptions(_model(), ["a"], [ideal])
    assert not any("servo loops" in line or "gearbox" in line for line in only_ideal)

"""The programmatic robot builder: validation of references and physical values."""
import numpy as np
import pytest

from retarget.model.robot import ModelError, RobotBuilder


def _builder():
    b = RobotBuilder("t")
    b.add_link("a", 1.0, (0, 0, 0), np.eye(3) * 1e-3)
    b.add_link("b", 1.0, (1, 0, 0), np.eye(3) * 1e-3)
    return b


def test_build_valid_robot():
    b = _builder()
    b.add_joint("j", "hinge", "a", "b", (0.5, 0, 0), (0, 0, 2), motor=True)
    b.add_joint("w", "fixed", None, "a", (0, 0, 0))
    b.track("b")
    model = b.build()
    assert model.motors == ("j",)
    assert np.allclose(model.joint("j").axis, (0, 0, 1))
    assert model.link("b").mass == 1.0


@pytest.mark.parametrize(
    "action",
    [
        lambda b: b.add_link("c", -1.0, (0, 0, 0), np.eye(3)),
        lambda b: b.add_link("c", 1.0, (0, 0, 0), -np.eye(3)),
        lambda b: b.add_link("a", 1.0, (0, 0, 0), np.eye(3)),
        lambda b: b.add_joint("j", "weird", "a", "b", (0, 0, 0)),
        lambda b: b.add_joint("j", "ball", "a", "b", (0, 0, 0), motor=True),
        lambda b: b.add_joint("j", "universal", "a", "b", (0, 0, 0), (0, 0, 1), axis2=(0, 1, 1)),
        lambda b: b.add_joint("j", "hinge", None, None, (0, 0, 0)),
    ],
)
def test_invalid_items_raise_model_error(action):
    with pytest.raises(ModelError):
        action(_builder())


def test_unknown_link_reference_is_reported_at_build():
    b = _builder()
    b.add_joint("j", "hinge", "a", "nope", (0, 0, 0))
    with pytest.raises(ModelError, match="nope"):
        b.build()

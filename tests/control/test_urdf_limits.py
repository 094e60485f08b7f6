"""URDF <limit> parsing."""
from __future__ import annotations

import math

import pytest

from retarget.control import limits_from_urdf
from retarget.errors import InputError

URDF = """<robot name="r">
  <link name="base"/><link name="l1"/><link name="l2"/><link name="l3"/>
  <joint name="j1" type="revolute"><parent link="base"/><child link="l1"/>
    <limit lower="-1.5" upper="2.0" velocity="8.06" effort="3"/></joint>
  <joint name="j2" type="continuous"><parent link="l1"/><child link="l2"/><limit velocity="0" effort="1"/></joint>
  <joint name="f" type="fixed"><parent link="l2"/><child link="l3"/></joint>
</robot>"""


def test_limits() -> None:
    lim = limits_from_urdf(URDF)
    assert set(lim) == {"j1", "j2"}
    assert lim["j1"] == (-1.5, 2.0, 8.06)
    assert math.isinf(lim["j2"].lower) and math.isinf(lim["j2"].velocity)


@pytest.mark.parametrize("xml", ["<robot", "<sdf/>"])
def test_bad_xml(xml: str) -> None:
    with pytest.raises(InputError):
        limits_from_urdf(xml)

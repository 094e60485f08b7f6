"""Control table loading, item codecs, unit conversions and Hardware Error Status decoding."""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from retarget.dynamixel import control_table as ct
from retarget.errors import InputError


def test_packaged_table_has_the_items_the_driver_uses() -> None:
    table = ct.load_control_table()
    assert table.model_number == 1030
    expected = {
        "Operating Mode": (11, 1), "Return Delay Time": (9, 1), "Current Limit": (38, 2),
        "Velocity Limit": (44, 4), "Max Position Limit": (48, 4), "Min Position Limit": (52, 4),
        "Torque Enable": (64, 1), "Hardware Error Status": (70, 1), "Profile Acceleration": (108, 4),
        "Profile Velocity": (112, 4), "Goal Position": (116, 4), "Present Current": (126, 2),
        "Present Velocity": (128, 4), "Present Position": (132, 4),
    }
    for name, (address, size) in expected.items():
        assert (table[name].address, table[name].size) == (address, size), name
    assert table["Torque Enable"].area == "RAM" and table["Operating Mode"].area == "EEPROM"
    assert table["Present Position"].access == "R"


def test_packaged_table_matches_the_model_file(shared_data: Path) -> None:
    """Every address/size/name of the ROBOTIS .model file (aliases aside) is in the packaged copy."""
    lines = (shared_data / "dynamixel" / "xm430_w210.model").read_text().splitlines()
    start = lines.index("[control table]") + 2
    table = ct.load_control_table()
    checked = 0
    for line in lines[start:]:
        address, size, name = line.split("\t")
        if name in table:
            assert (table[name].address, table[name].size) == (int(address), int(size)), name
            checked += 1
        else:
            assert name.startswith("Indirect"), f"{name} missing from the packaged table"
    assert checked >= 50


def test_item_codec_round_trip_signed_and_unsigned() -> None:
    table = ct.load_control_table()
    rng = np.random.default_rng(0)
    for item in table.items:
        bits = 8 * item.size
        lo, hi = (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1) if item.signed else (0, 2**bits - 1)
        for value in [lo, hi, 0, *rng.integers(lo, hi, size=5, endpoint=True).tolist()]:
            assert item.decode(item.encode(value)) == value
    with pytest.raises(InputError):
        table["Torque Enable"].encode(256)
    with pytest.raises(InputError):
        table["No Such Item"]


def test_initial_image_and_overlap() -> None:
    table = ct.load_control_table()
    image = table.initial_image()
    assert len(image) == table.size
    assert table["Model Number"].decode(image[0:2]) == 1030
    assert table["Return Delay Time"].decode(image[9:10]) == 250
    names = [it.name for it in table.overlapping(126, 10)]
    assert names == ["Present Current", "Present Velocity", "Present Position"]


def test_position_convention_and_round_trip() -> None:
    assert ct.position_to_radians(2048) == 0.0
    assert ct.position_to_radians(0) == pytest.approx(-math.pi)
    assert ct.position_to_radians(3072) == pytest.approx(math.pi / 2)
    ticks = np.arange(-5000, 9000, 7)
    assert np.array_equal(ct.radians_to_position(ct.position_to_radians(ticks)), ticks)
    angles = np.random.default_rng(1).uniform(-math.pi, math.pi, 1000)
    err = ct.position_to_radians(ct.radians_to_position(angles)) - angles
    assert np.max(np.abs(err)) <= 0.5 * ct.POSITION_RAD_PER_TICK + 1e-12


def test_velocity_current_acceleration_units() -> None:
    assert ct.velocity_to_rad_s(1) == pytest.approx(0.229 * 2 * math.pi / 60)
    # 77 rev/min no-load speed is 336 units of 0.229 rev/min.
    assert ct.rad_s_to_velocity(77 * 2 * math.pi / 60) == 336
    assert ct.current_to_amperes(1000) == pytest.approx(2.69)
    assert ct.amperes_to_current(-2.69) == -1000
    assert ct.profile_acceleration_to_rad_s2(1) == pytest.approx(214.577 * 2 * math.pi / 3600)
    raw = np.arange(-300, 300)
    assert np.array_equal(ct.rad_s_to_velocity(ct.velocity_to_rad_s(raw)), raw)
    assert np.array_equal(ct.amperes_to_current(ct.current_to_amperes(raw)), raw)
    assert np.array_equal(ct.rad_s2_to_profile_acceleration(ct.profile_acceleration_to_rad_s2(raw)), raw)


def test_hardware_error_bits() -> None:
    status = ct.HardwareErrorStatus(0x20 | 0x04)
    assert status.names() == ["overheating", "overload"]
    assert ct.HardwareErrorStatus(0x01).names() == ["input voltage"]
    assert ct.HardwareErrorStatus(0x08).names() == ["motor encoder"]
    assert ct.HardwareErrorStatus(0x10).names() == ["electrical shock"]
    assert ct.HardwareErrorStatus(0x42).names() == ["bit 1", "bit 6"]
    assert ct.HardwareErrorStatus.from_names(["overload", "OVERHEATING"]) == status
    with pytest.raises(InputError, match="unknown hardware error"):
        ct.HardwareErrorStatus.from_names(["melted"])


def test_bad_table_file(tmp_path: Path) -> None:
    bad = tmp_path / "t.yaml"
    bad.write_text("model: x\n")
    with pytest.raises(InputError, match="malformed"):
        ct.load_control_table(bad)
    with pytest.raises(InputError, match="cannot read"):
        ct.load_control_table(tmp_path / "missing.yaml")


# ---- servo models ---------------------------------------------------------------------------------------------


def test_each_packaged_model_loads_by_name_with_its_identity_and_ratings() -> None:
    xm430 = ct.load_control_table(model="XM430-W210")
    assert xm430 is ct.load_control_table()  # the default, cached
    xm540 = ct.load_control_table(model="xm540-w270")  # case-insensitive
    assert ct.SERVO_MODELS == ("XM430-W210", "XM430-W350", "XM540-W270") and ct.DEFAULT_SERVO_MODEL == "XM430-W210"
    assert (xm540.model, xm540.model_number, xm540["Model Number"].initial) == ("XM540-W270", 1120, 1120)
    # e-manual, 12 V: 77 rev/min, 3.0 N m at 2.3 A; 30 rev/min, 10.6 N m at 4.4 A.
    assert xm430.ratings.no_load_speed == pytest.approx(77 * 2 * math.pi / 60)
    assert (xm430.ratings.stall_torque, xm430.ratings.stall_current) == (3.0, 2.3)
    assert xm540.ratings.no_load_speed == pytest.approx(math.pi)
    assert (xm540.ratings.stall_torque, xm540.ratings.stall_current) == (10.6, 4.4)
    # The larger servo's own limits; everything the driver touches keeps the X-series address and size.
    assert (xm540["Current Limit"].initial, xm540["Current Limit"].maximum) == (2047, 2047)
    assert (xm540["Goal Current"].minimum, xm540["Goal Current"].maximum) == (-2047, 2047)
    assert xm540["Velocity Limit"].initial == 128
    for item in xm430.items:
        assert (xm540[item.name].address, xm540[item.name].size, xm540[item.name].signed) == \
            (item.address, item.size, item.signed), item.name
    extra = sorted(it.name for it in xm540.items if it.name not in xm430)
    assert extra == [f"External Port {kind} {i}" for kind in ("Data", "Mode") for i in (1, 2, 3)]
    assert xm540.size == xm430.size and len(xm540.initial_image()) == xm540.size
    # The XM430-W350 (OpenManipulator-X, ROBOTIS OP3): the XM430-W210's items at the same addresses, its own
    # identity, factory Velocity Limit and ratings (12 V: 46 rev/min, 4.1 N m at 2.3 A).
    w350 = ct.load_control_table(model="XM430-W350")
    assert (w350.model_number, w350["Model Number"].initial, ct.model_name(1020)) == (1020, 1020, "XM430-W350")
    assert w350.ratings.no_load_speed == pytest.approx(46 * 2 * math.pi / 60)
    assert (w350.ratings.stall_torque, w350.ratings.stall_current) == (4.1, 2.3)
    assert w350["Velocity Limit"].initial == 200
    assert [(it.name, it.address, it.size, it.signed, it.minimum, it.maximum) for it in w350.items] == \
        [(it.name, it.address, it.size, it.signed, it.minimum, it.maximum) for it in xm430.items]


def test_unknown_model_other_units_and_both_sources_are_input_errors(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="unknown servo model 'XL330-M288'; known: XM430-W210, XM430-W350, XM540-W270"):
        ct.load_control_table(model="XL330-M288")
    with pytest.raises(InputError, match="not both"):
        ct.load_control_table(tmp_path / "t.yaml", model="XM540-W270")
    packaged = Path(ct.__file__).parents[1] / "data" / "dynamixel" / "xm540_w270.yaml"
    other = tmp_path / "other_units.yaml"
    other.write_text(packaged.read_text().replace("current_ampere_per_unit: 0.00269", "current_ampere_per_unit: 0.001"))
    with pytest.raises(InputError, match="current_ampere_per_unit is 0.001, but retarget converts with"):
        ct.load_control_table(other)
    # A table file without ratings (an older copy) gets the XM430-W210's.
    bare = tmp_path / "bare.yaml"
    text = packaged.read_text()
    bare.write_text(text[:text.index("\nratings:") + 1] + text[text.index("\nitems:") + 1:])
    assert ct.load_control_table(bare).ratings == ct.load_control_table().ratings

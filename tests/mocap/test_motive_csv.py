"""Motive CSV import: the three real exports and malformed header variants."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from retarget.errors import InputError
from retarget.mocap.errors import MotiveCsvError
from retarget.mocap.motive_csv import read_motive_csv

V121 = "motive_v1.21_rigidbody_markers_sample_optitrack_take.csv"
V123 = "motive_v1.23_markers_360Hz_mm_test_markers_enabled.csv"
EMPTY = "motive_v1.23_no_assets_edgecase_test_default.csv"


def test_v121_rigid_body_and_markers(optitrack_dir: Path) -> None:
    take = read_motive_csv(optitrack_dir / V121)
    h = take.header
    assert (h.format_version, h.rotation_type, h.length_units, h.capture_frame_rate_hz) == (
        "1.21", "Quaternion", "Meters", 120.0
    )
    assert take.frame.shape == (250,) and take.time_s[1] == pytest.approx(0.008333)
    body = take.rigid_bodies["Rigid Body 1"]
    assert body.id == "CF5107FCB3ED11E565670A50E6808782"
    # First data row: rotation X,Y,Z,W then position X,Y,Z then error per marker.
    np.testing.assert_allclose(body.position_m[0], (0.060002, 0.019150, 0.076611))
    np.testing.assert_allclose(body.orientation_xyzw[0], (0.000035, 0.000016, -0.000030, -1.0), atol=1e-9)
    np.testing.assert_allclose(np.linalg.norm(body.orientation_xyzw, axis=1), 1.0, atol=1e-12)
    assert body.mean_error_m is not None and body.mean_error_m[0] == pytest.approx(0.000004)
    assert body.tracked.all()
    rb_marker = take.markers["Rigid Body 1_1"]
    assert rb_marker.kind == "Rigid Body Marker" and rb_marker.quality[0] == pytest.approx(0.998795)
    unlabeled = take.markers["Unlabeled:105"]
    assert unlabeled.kind == "Marker" and np.isnan(unlabeled.position_m[0]).all()  # occluded (empty) cells


def test_v123_markers_in_millimetres(optitrack_dir: Path) -> None:
    take = read_motive_csv(optitrack_dir / V123)
    assert take.header.length_units == "Millimeters" and take.header.capture_frame_rate_hz == 360.0
    assert take.rigid_bodies == {} and len(take.markers) == 18 and take.frame.shape == (1353,)
    np.testing.assert_allclose(take.markers["Unlabeled 1036"].position_m[0], (2.659741943, -0.830793884, -2.86219165))
    occluded = sum(int(np.isnan(m.position_m[:, 0]).sum()) for m in take.markers.values())
    assert occluded > 0


def test_no_asset_export_fails_precisely(optitrack_dir: Path) -> None:
    with pytest.raises(MotiveCsvError, match="no rigid body or marker columns") as info:
        read_motive_csv(optitrack_dir / EMPTY)
    assert isinstance(info.value, InputError) and info.value.path.name == EMPTY


HEADER = (
    "Format Version,{version},Take Name,t,Capture Frame Rate,100.0,Export Frame Rate,100.0,"
    "Rotation Type,{rotation},Length Units,{units},Coordinate Space,Global\n\n"
)
BODY = (
    ",Type,Rigid Body,Rigid Body,Rigid Body,Rigid Body,Rigid Body,Rigid Body,Rigid Body{extra_type}\n"
    ",Name,tip,tip,tip,tip,tip,tip,tip{extra_name}\n"
    ",ID,1,1,1,1,1,1,1{extra_id}\n"
    ",,Rotation,Rotation,Rotation,Rotation,Position,Position,Position{extra_prop}\n"
    "Frame,Time (Seconds),X,Y,Z,W,X,Y,Z{extra_axis}\n"
)


def _write(tmp_path: Path, rows: str, version: str = "1.23", rotation: str = "Quaternion",
           units: str = "Millimeters", **extra: str) -> Path:
    fields = {"extra_type": "", "extra_name": "", "extra_id": "", "extra_prop": "", "extra_axis": ""} | extra
    path = tmp_path / "take.csv"
    path.write_text(HEADER.format(version=version, rotation=rotation, units=units) + BODY.format(**fields) + rows)
    return path


def test_synthetic_quaternion_mm_with_occlusion(tmp_path: Path) -> None:
    take = read_motive_csv(_write(tmp_path, "0,0.0,0,0,0,1,10,20,30\n1,0.01,,,,,,,\n"))
    body = take.rigid_bodies["tip"]
    np.testing.assert_allclose(body.position_m[0], (0.01, 0.02, 0.03))
    assert body.tracked.tolist() == [True, False]


def test_euler_export_is_converted(tmp_path: Path) -> None:
    path = tmp_path / "euler.csv"
    path.write_text(
        HEADER.format(version="1.23", rotation="XYZ", units="Meters")
        + ",Type" + ",Rigid Body" * 6 + "\n"
        + ",Name" + ",tip" * 6 + "\n"
        + ",ID" + ",1" * 6 + "\n"
        + ",," + "Rotation," * 3 + "Position,Position,Position\n"
        + "Frame,Time (Seconds),X,Y,Z,X,Y,Z\n"
        + "0,0.0,0,0,90,1,2,3\n"
    )
    q = read_motive_csv(path).rigid_bodies["tip"].orientation_xyzw[0]
    np.testing.assert_allclose(q, (0, 0, np.sqrt(0.5), np.sqrt(0.5)), atol=1e-12)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"version": "1.10"}, "format version '1.10' not supported"),
        ({"rotation": "Matrix"}, "rotation type 'Matrix' not supported"),
        ({"units": "Inches"}, "length units 'Inches' not supported"),
    ],
)
def test_bad_header_values(tmp_path: Path, kwargs: dict[str, str], message: str) -> None:
    with pytest.raises(MotiveCsvError, match=message) as info:
        read_motive_csv(_write(tmp_path, "0,0.0,0,0,0,1,1,2,3\n", **kwargs))
    assert info.value.line == 1


def test_structural_errors(tmp_path: Path) -> None:
    path = tmp_path / "x.csv"
    path.write_text("Frame,Time\n0,0\n")
    with pytest.raises(MotiveCsvError, match="Format Version"):
        read_motive_csv(path)
    path.write_text(HEADER.format(version="1.23", rotation="Quaternion", units="Meters"))
    with pytest.raises(MotiveCsvError, match="no 'Frame,Time' row"):
        read_motive_csv(path)
    with pytest.raises(MotiveCsvError, match="not a number: 'abc'") as info:
        read_motive_csv(_write(tmp_path, "0,0.0,0,0,0,1,abc,2,3\n"))
    assert info.value.line == 8
    with pytest.raises(MotiveCsvError, match="no data rows"):
        read_motive_csv(_write(tmp_path, ""))
    with pytest.raises(MotiveCsvError, match="expected one 'Position Z' column"):
        read_motive_csv(_missing_axis(tmp_path))
    with pytest.raises(MotiveCsvError, match="cannot read"):
        read_motive_csv(tmp_path / "missing.csv")


def _missing_axis(tmp_path: Path) -> Path:
    path = _write(tmp_path, "0,0.0,0,0,0,1,1,2,3\n")
    path.write_text(path.read_text().replace("W,X,Y,Z", "W,X,Y,Q"))
    return path

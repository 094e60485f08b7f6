"""The mocap CLI commands through ``retarget.cli.main`` (real files, real bags)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from retarget.cli import main
from retarget.mocap.bags import read_pose_series

V121 = "motive_v1.21_rigidbody_markers_sample_optitrack_take.csv"


def _last_json(capsys: pytest.CaptureFixture[str]) -> dict:
    return json.loads(capsys.readouterr().out.strip().splitlines()[-1])


@pytest.mark.parametrize("storage", ["mcap", "sqlite3"])
def test_mocap_import_then_bag_info(
    optitrack_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], storage: str
) -> None:
    out = tmp_path / "take"
    code = main(["mocap-import", str(optitrack_dir / V121), "--out", str(out), "--storage", storage,
                 "--start-time", "1000", "--frame-id", "optitrack", "--json"])
    assert code == 0
    summary = _last_json(capsys)
    assert summary["storage"] == storage and summary["message_count"] == 250
    assert summary["topics"] == [{"name": "/mocap/Rigid_Body_1/pose", "type": "geometry_msgs/msg/PoseStamped",
                                  "count": 250}]
    poses = read_pose_series(out, "/mocap/Rigid_Body_1/pose")
    assert poses.time_s[0] == pytest.approx(1000.0) and poses.frame_id == "optitrack"
    assert poses.position_m[0] == pytest.approx((0.060002, 0.019150, 0.076611))
    assert main(["bag-info", str(out), "--json"]) == 0
    assert _last_json(capsys)["message_count"] == 250


def test_mocap_import_errors(optitrack_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    markers_only = optitrack_dir / "motive_v1.23_markers_360Hz_mm_test_markers_enabled.csv"
    assert main(["mocap-import", str(markers_only), "--out", str(tmp_path / "a")]) == 2
    assert "no rigid bodies (only 18 markers)" in capsys.readouterr().err
    no_assets = optitrack_dir / "motive_v1.23_no_assets_edgecase_test_default.csv"
    assert main(["mocap-import", str(no_assets), "--out", str(tmp_path / "b")]) == 2
    assert "exported without assets" in capsys.readouterr().err
    assert main(["mocap-import", str(optitrack_dir / V121), "--out", str(tmp_path / "c"), "--bodies", "nope"]) == 2
    assert "no rigid body 'nope'" in capsys.readouterr().err
    assert not any(tmp_path.iterdir())


def test_bag_info_on_real_bag(rosbag_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bag-info", str(rosbag_dir / "talker_mcap"), "--json"]) == 0
    summary = _last_json(capsys)
    assert summary["storage"] == "mcap" and summary["message_count"] == 20


def test_natnet_decode(natnet_dir: Path, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["natnet-decode", str(natnet_dir / "traffic.pcapng"), "--json"]) == 0
    summary = _last_json(capsys)
    assert summary["frames"] == 518 and summary["malformed"] == 0 and summary["first_frame"] == 162734
    bad = tmp_path / "bad.bin"
    bad.write_bytes((natnet_dir / "mocapframe_packet_v3.bin").read_bytes()[:100])
    assert main(["natnet-decode", str(bad), "--json"]) == 0
    assert _last_json(capsys)["malformed"] == 1
    assert main(["natnet-decode", str(bad), "--natnet-version", "x"]) == 2


def test_natnet_decode_reads_a_folder_of_packets_in_name_order(natnet_dir: Path, tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    folder = tmp_path / "packets"
    folder.mkdir()
    for name in ("mocapframe_packet_v3.bin", "connect_packet_v3.bin"):
        (folder / name).write_bytes((natnet_dir / name).read_bytes())
    (folder / "notes.txt").write_text("not a packet")
    assert main(["natnet-decode", str(folder), "--json"]) == 0
    out = capsys.readouterr().out
    assert out.index("connect_packet_v3.bin") < out.index("mocapframe_packet_v3.bin") and "notes.txt" not in out
    assert json.loads(out.strip().splitlines()[-1])["frames"] == 1
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["natnet-decode", str(empty)]) == 2
    assert "a folder without NatNet packets or captures (.bin, .pcap, .pcapng files)" in capsys.readouterr().err
    assert main(["natnet-decode", str(tmp_path / "missing.bin")]) == 2
    assert "missing.bin: no such file or folder" in capsys.readouterr().err

"""The MCAP export (retarget.report.mcap_export) read back with the mcap readers: schemas, message counts per topic,
and decoded contents (TF of every link, the rod's line strip, deviations equal to the report's)."""
from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from retarget.report.animation import CENTRE_LINE_POINTS, load_animation

# The plans these tests run fork worker processes (the full-FEM checks, the robust members).
pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def bag(tiny_report):
    from mcap.reader import make_reader
    from mcap_ros2.decoder import DecoderFactory

    path = tiny_report / "animation.mcap"
    with open(path, "rb") as fh:
        reader = make_reader(fh, decoder_factories=[DecoderFactory()])
        summary = reader.get_summary()
        messages = [(channel.topic, message.log_time, ros)
                    for _, channel, message, ros in reader.iter_decoded_messages()]
    return summary, messages


def test_schemas_and_counts_per_topic(bag, tiny_report):
    summary, messages = bag
    animation = load_animation(tiny_report / "animation.npz")
    n_f, n_t = len(animation.times), len(animation.deviation_times)
    expected = {"/tf_static": ("tf2_msgs/msg/TFMessage", 1), "/tf": ("tf2_msgs/msg/TFMessage", n_f),
                "/robot/visuals": ("visualization_msgs/msg/MarkerArray", 1),
                "/robot/flexible_parts": ("visualization_msgs/msg/MarkerArray", n_f),
                "/robot/targets": ("visualization_msgs/msg/MarkerArray", n_f)}
    for run in ("naive", "zvd", "optimized"):
        expected[f"/deviation/{run}/tip"] = ("std_msgs/msg/Float64", n_t)
        expected[f"/deviation/{run}/max"] = ("std_msgs/msg/Float64", n_t)
    found = {c.topic: (summary.schemas[c.schema_id].name, summary.statistics.channel_message_counts[c.id])
             for c in summary.channels.values()}
    assert found == expected
    assert all(summary.schemas[c.schema_id].encoding == "ros2msg" and c.message_encoding == "cdr"
               for c in summary.channels.values())
    assert Counter(topic for topic, _, _ in messages) == {k: v[1] for k, v in expected.items()}


def test_decoded_contents(bag, tiny_report):
    _, messages = bag
    animation = load_animation(tiny_report / "animation.npz")
    tf = [m for topic, _, m in messages if topic == "/tf"]
    frames = {t.child_frame_id for t in tf[0].transforms}
    assert frames == {f"{run}/{link}" for run in animation.variants for link in animation.links} | {
        f"{run}/target/tip" for run in animation.variants}
    last = {t.child_frame_id: t for t in tf[-1].transforms}
    tip = last["optimized/tip"].transform.translation
    assert np.allclose([tip.x, tip.y, tip.z], animation.link_positions[2, -1, 2], atol=1e-7)
    static = next(m for topic, _, m in messages if topic == "/tf_static")
    assert [t.child_frame_id for t in static.transforms] == list(animation.variants)
    lines = next(m for topic, _, m in messages if topic == "/robot/flexible_parts")
    assert len(lines.markers) == 3
    assert all(len(mk.points) == CENTRE_LINE_POINTS and mk.type == 4 for mk in lines.markers)
    assert lines.markers[0].scale.x == pytest.approx(0.004)
    visuals = next(m for topic, _, m in messages if topic == "/robot/visuals")
    assert all(mk.frame_locked for mk in visuals.markers)
    # horn box + tip sphere per run, and the tip's ghost per run.
    assert sorted(mk.header.frame_id for mk in visuals.markers) == sorted(
        f"{run}/{link}" for run in animation.variants for link in ("horn", "tip", "target/tip"))
    deviation = np.array([m.data for topic, _, m in messages if topic == "/deviation/naive/tip"])
    assert np.allclose(deviation, animation.deviations[0, :, 0], atol=1e-7)
    stamps = [t for topic, t, _ in messages if topic == "/deviation/naive/tip"]
    assert np.allclose(np.array(stamps) * 1e-9, animation.deviation_times, atol=1e-9)

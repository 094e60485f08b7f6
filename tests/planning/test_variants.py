"""The plan's simulated variants (retarget.planning.variants): the naive variant is the optimizer's first
evaluation, re-simulated identically; the shaped baselines say why they are missing without ring-out."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from rod_plan import OPTIONS, ramp, rod_limits, tip

from retarget.motion.motion import Motion
from retarget.planning.run import run_plan
from retarget.planning.variants import motion_stop_time, shaped_baselines, simulate_variant
from retarget.sim.adapters import reduced_engine


def test_naive_variant_is_the_first_evaluation(rod_systems):
    _, rs = rod_systems
    result = run_plan(reduced_engine(rs, 1e-10), ramp(), tip(), rod_limits(), OPTIONS)
    again = simulate_variant(result.pp, "naive", result.pp.fit.profiles)
    naive = result.variants["naive"]
    np.testing.assert_allclose(naive.positions, again.positions, rtol=0, atol=1e-12)
    np.testing.assert_allclose(naive.torques, again.torques, rtol=0, atol=1e-9)
    np.testing.assert_allclose(naive.angles, again.angles, rtol=0, atol=1e-12)
    assert naive.metrics == again.metrics


ENDS_BEFORE_THE_STOP = "the simulation ends at 3.00 s, before the motion stops moving (9.00 s)"


@pytest.mark.parametrize(("end", "expected"), [(3.0, ENDS_BEFORE_THE_STOP),
                                               (9.2, "only 0.20 s of ring-out after the motion stops")])
def test_no_shaped_baselines_without_ring_out_says_why(end: float, expected: str) -> None:
    """A simulation cut before the motion stops (``--duration``) has no ring-out at all: said so, not as a
    negative ring-out."""
    t = np.linspace(0.0, 10.0, 101)
    motion = Motion(t, ("a",), np.minimum(t, 9.0)[:, None])
    assert motion_stop_time(motion) == pytest.approx(9.0, abs=1e-12)
    pp = SimpleNamespace(motion=motion, targets=SimpleNamespace(times=np.linspace(0.0, end, 51)))
    warnings: list[str] = []
    assert shaped_baselines(pp, None, None, warnings) == {}  # type: ignore[arg-type]
    assert len(warnings) == 1 and expected in warnings[0]

"""The simulator's errors cross process boundaries: a robust member's simulation that fails in a forked worker
(:mod:`retarget.optimize.parallel`) reaches the planner as the same error, not as a broken worker pool."""
from __future__ import annotations

import pickle

import pytest

from retarget.optimize.parallel import fork_pool, run_shared
from retarget.sim.errors import NewtonFailed, SimulationDiverged

NORMS = [{"kinematic": 0.0, "dynamic": 1.2e3, "constraint": 4.0e-2}]


@pytest.mark.parametrize("cls", [NewtonFailed, SimulationDiverged])
def test_pickle_round_trip_keeps_the_class_message_and_fields(cls):
    error = cls(7, 0.014, NORMS, "inverted element")
    back = pickle.loads(pickle.dumps(error))
    assert type(back) is cls and str(back) == str(error)
    assert (back.step, back.time, back.residual_norms, back.reason) == (7, 0.014, NORMS, "inverted element")


def _fail(_shared):
    raise SimulationDiverged(3, 0.006, NORMS, "non-finite iterate")


@pytest.mark.integration
def test_a_failure_in_a_forked_worker_arrives_as_the_simulation_error():
    with fork_pool((), 2) as pool:
        if pool is None:
            pytest.skip("no fork on this platform")
        executor, key = pool
        with pytest.raises(SimulationDiverged, match="non-finite iterate"):
            executor.submit(run_shared, key, _fail).result(timeout=60)
        assert executor.submit(run_shared, key, len).result(timeout=60) == 0  # the pool still works

"""Default training settings of reduced models, in a module without heavy imports (the CLI's option defaults
and ``--help`` read them; :mod:`~retarget.sim.reduced.basis` and :mod:`~retarget.sim.reduced.training` re-export
them)."""
from __future__ import annotations

__all__ = ["DEFAULT_CUBATURE_TOLERANCE", "DEFAULT_MAX_REPLAY_TRIALS", "DEFAULT_REPLAY_TOLERANCE", "DEFAULT_VARIANCE",
           "MIN_CUBATURE_TOLERANCE"]

#: Default fraction of the mass-weighted snapshot variance the deformation modes must capture.
DEFAULT_VARIANCE: float = 0.9999

#: Default tolerance of the training-replay check: RMS tracked-body error of the reduced replay of the training
#: motion, relative to the tracked bodies' peak travel in the full training run.
DEFAULT_REPLAY_TOLERANCE: float = 0.001

#: Relative training error of the cubature (:func:`~retarget.sim.reduced.cubature.train_cubature`) by default, and
#: the tightest the replay check goes to (tenfold per trial).
DEFAULT_CUBATURE_TOLERANCE: float = 1e-3
MIN_CUBATURE_TOLERANCE: float = 1e-6

#: ``retarget reduce``'s bound on the replay check's trials (each builds a basis and a cubature and replays the
#: training motion: minutes on a large robot). Without it a check that cannot pass builds up to twelve models (the
#: variance tightened eight times, then the cubature tolerance three times) before it keeps the most accurate. Eight
#: cover the measured cases: the drummer's check passes at its sixth trial (variance 0.9999 to 1 - 1e-9), the single
#: rod's 15 modes at the fourth (cubature 1e-3 to 1e-6; docs/reduced.md "Replay check").
DEFAULT_MAX_REPLAY_TRIALS: int = 8

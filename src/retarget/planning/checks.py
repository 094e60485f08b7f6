"""What the checks after a plan found (:func:`retarget.planning.verification.check_plan`), as frozen typed results.

- :class:`RunFigures`: one simulated run against the targets (peak and RMS deviation, ring-out, torque).
- :class:`FinerStepCheck`: the plan re-simulated at a finer step in the planning model (``verify``).
- :class:`BandResult`, :class:`StiffnessBand`: the variants in the planning model with every flexible part's
  stiffness × a factor (``band``).
- :class:`Verification`: the variants in a model the plan was not optimized on — the full FEM or an independently
  trained reduced model (``verified``, ``verified_band``).
- :class:`Verdict`: the headline (optimized over naive peak where the cut is judged), whether the cut is meaningful,
  whether the servos can drive it, the refusal to play it and ``retarget plan``'s exit status.
- :class:`PlanChecks`: all of them for one plan.

Each result serializes itself with ``to_json()`` into the plan report's shape (``retarget plan --json``, the ROS
result's ``metrics_json``, the benchmarks' JSON); ``from_json`` reads that shape back (a report received over ROS).
Nothing else builds or parses the report's keys.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["MEANINGFUL_CUT", "NO_CUT_SLACK", "BandResult", "CutStatus", "ExitStatus", "FinerStepCheck",
           "ModelKind", "NaiveAtFinerStep", "PlanChecks", "RunFigures", "StiffnessBand", "Verdict", "Verification",
           "band_from_entries", "finer_step_holds", "stiffness_key"]

#: A plan whose optimized peak deviation (in the verification model, else the planning model) is above this fraction
#: of naive playback's has not reached a meaningful cut: ``cut_reached`` is false and ``retarget plan`` exits 3 (as it
#: does when the optimized motion needs more than the stall torque: ``within_stall`` false).
MEANINGFUL_CUT = 0.9

#: How much worse than its planning-step figure a plan that claims no reduction may do at the finer step.
NO_CUT_SLACK = 1.1

#: The smallest denominator of a ratio of deviations [m] (a run that did not move).
_TINY = 1e-300

#: A JSON mapping as the report holds it.
JsonObject = dict[str, object]


def finer_step_holds(peak_ratio: float, planning_peak_ratio: float) -> bool:
    """Whether a plan's figure holds at the finer step: a plan that cuts the peak (``planning_peak_ratio`` < 1)
    keeps at least half its reduction there, ``1 − peak_ratio ≥ ½ (1 − planning_peak_ratio)``; one that claims no
    reduction is not more than :data:`NO_CUT_SLACK` × worse there (a rapper plan at 1.01 × naive at 2.5 ms was
    2.32 × at 1 ms: its profiles drove the arm where the planning step did not show it)."""
    if planning_peak_ratio >= 1.0:
        return bool(peak_ratio <= NO_CUT_SLACK * planning_peak_ratio)
    return bool(1.0 - peak_ratio >= 0.5 * (1.0 - planning_peak_ratio))


def stiffness_key(factor: float) -> str:
    """The report's key of a stiffness factor (``"x0.9"``): the band's and ``verified_band``'s entries."""
    return f"x{float(factor):g}"


def _factor_of(key: str) -> float:
    """The stiffness factor of a report key written by :func:`stiffness_key`."""
    return float(key[1:])


@dataclass(frozen=True)
class RunFigures:
    """One simulated run measured against the planner's quasi-static targets.

    Attributes:
        peak_deviation_m: the tracked bodies' largest distance from their targets [m].
        rms_deviation_m: their RMS distance [m].
        peak_torque_ratio: the largest peak |τ| over stall of the motors [-].
        ring_out_peak_m: the largest distance once the run's commanded motion has stopped [m]; None: not measured
            (the finer-step check).
    """

    peak_deviation_m: float
    rms_deviation_m: float
    peak_torque_ratio: float
    ring_out_peak_m: float | None = None

    def to_json(self) -> JsonObject:
        out: JsonObject = {"peak_deviation_m": self.peak_deviation_m, "rms_deviation_m": self.rms_deviation_m}
        if self.ring_out_peak_m is not None:
            out["ring_out_peak_m"] = self.ring_out_peak_m
        out["peak_torque_ratio"] = self.peak_torque_ratio
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, object]) -> RunFigures:
        ring = data.get("ring_out_peak_m")
        return cls(float(data["peak_deviation_m"]), float(data["rms_deviation_m"]),
                   float(data["peak_torque_ratio"]), None if ring is None else float(ring))


#: The variants a check re-simulates, in the report's order.
_VARIANTS = ("naive", "zvd", "optimized")


@dataclass(frozen=True)
class _Runs:
    """The plan's variants simulated in one model (``runs``: variant name → figures) and their ratios."""

    runs: Mapping[str, RunFigures]

    @property
    def naive(self) -> RunFigures | None:
        return self.runs.get("naive")

    @property
    def zvd(self) -> RunFigures | None:
        return self.runs.get("zvd")

    @property
    def optimized(self) -> RunFigures | None:
        return self.runs.get("optimized")

    def _ratio(self, over: RunFigures | None, field_name: str) -> float | None:
        if self.optimized is None or over is None:
            return None
        return getattr(self.optimized, field_name) / max(getattr(over, field_name), _TINY)

    @property
    def peak_ratio(self) -> float | None:
        """Optimized over naive peak deviation; None without both runs."""
        return self._ratio(self.naive, "peak_deviation_m")

    @property
    def rms_ratio(self) -> float | None:
        """Optimized over naive RMS deviation."""
        return self._ratio(self.naive, "rms_deviation_m")

    @property
    def zvd_rms_ratio(self) -> float | None:
        """Optimized over ZVD RMS deviation; None without a ZVD run."""
        return self._ratio(self.zvd, "rms_deviation_m")

    @property
    def zvd_peak_ratio(self) -> float | None:
        """Optimized over ZVD peak deviation."""
        return self._ratio(self.zvd, "peak_deviation_m")

    def _runs_json(self) -> JsonObject:
        out: JsonObject = {name: self.runs[name].to_json() for name in self.runs}
        if self.peak_ratio is not None:
            out["peak_ratio"], out["rms_ratio"] = self.peak_ratio, self.rms_ratio
        if self.zvd_rms_ratio is not None:
            out["zvd_rms_ratio"], out["zvd_peak_ratio"] = self.zvd_rms_ratio, self.zvd_peak_ratio
        return out


def _runs_from_json(data: Mapping[str, object]) -> dict[str, RunFigures]:
    return {name: RunFigures.from_json(data[name]) for name in _VARIANTS if isinstance(data.get(name), Mapping)}


@dataclass(frozen=True)
class BandResult(_Runs):
    """The plan's variants in the planning model with every flexible part's stiffness × ``stiffness_factor``."""

    stiffness_factor: float = 1.0

    def to_json(self) -> JsonObject:
        return self._runs_json()


@dataclass(frozen=True)
class StiffnessBand:
    """The robustness band: one :class:`BandResult` per stiffness factor, in the order asked."""

    results: tuple[BandResult, ...]

    @property
    def factors(self) -> tuple[float, ...]:
        return tuple(r.stiffness_factor for r in self.results)

    @property
    def worst_peak_ratio(self) -> float | None:
        """The largest optimized/naive peak ratio over the band; None when no factor has both runs."""
        ratios = [r.peak_ratio for r in self.results if r.peak_ratio is not None]
        return max(ratios) if ratios else None

    def to_json(self) -> JsonObject:
        return {**{stiffness_key(r.stiffness_factor): r.to_json() for r in self.results},
                "worst_peak_ratio": self.worst_peak_ratio}

    @classmethod
    def from_json(cls, data: Mapping[str, object] | None) -> StiffnessBand:
        """The band of a report (``{}`` or None: an empty band)."""
        return cls(tuple(BandResult(_runs_from_json(entry), _factor_of(key)) for key, entry in (data or {}).items()
                         if key != "worst_peak_ratio" and isinstance(entry, Mapping)))


class ModelKind(enum.StrEnum):
    """The model a plan is verified in."""

    FULL_FEM = "full FEM"
    REDUCED = "reduced model"


@dataclass(frozen=True)
class Verification(_Runs):
    """The plan's variants re-simulated in a model it was not optimized on.

    Attributes:
        runs: variant name → figures.
        kind: the full FEM or an independently trained reduced model.
        dt_s: the step [s].
        stiffness_factor: factor on every flexible part's stiffness (1: the nominal robot).
        deformable_dofs: deformable DOFs of the model's mesh (None: unknown).
        wall_s: wall time of the runs [s].
        file: the reduced model's artifact ("" unknown; None for the full FEM).
        modes: the reduced model's deformation modes per part (None: unknown or full FEM).
    """

    kind: ModelKind = ModelKind.FULL_FEM
    dt_s: float = 0.0
    stiffness_factor: float = 1.0
    deformable_dofs: int | None = None
    wall_s: float = 0.0
    file: str | None = None
    modes: tuple[int, ...] | None = None

    @property
    def model(self) -> str:
        """The model's description: ``"full FEM"`` or ``"reduced model <file name>"``."""
        if self.kind is ModelKind.REDUCED and self.file:
            return f"{ModelKind.REDUCED} {Path(self.file).name}"
        return str(self.kind)

    @property
    def described(self) -> str:
        """:attr:`model`, naming the full FEM's rigid-body engine on a robot without flexible parts."""
        if self.kind is ModelKind.FULL_FEM and self.deformable_dofs == 0:
            return f"{self.kind}'s rigid-body engine (no flexible parts)"
        return self.model

    def to_json(self) -> JsonObject:
        out: JsonObject = {"model": self.model}
        if self.kind is ModelKind.REDUCED:
            out.update(file=self.file or "", deformable_dofs=self.deformable_dofs,
                       modes=None if self.modes is None else list(self.modes))
        else:
            out["deformable_dofs"] = self.deformable_dofs
        out.update(dt_s=self.dt_s, stiffness_factor=self.stiffness_factor)
        out.update(self._runs_json())
        out["wall_s"] = self.wall_s
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, object]) -> Verification:
        reduced = "file" in data
        modes = data.get("modes")
        return cls(_runs_from_json(data), ModelKind.REDUCED if reduced else ModelKind.FULL_FEM,
                   float(data.get("dt_s", 0.0)), float(data.get("stiffness_factor", 1.0)),
                   None if data.get("deformable_dofs") is None else int(data["deformable_dofs"]),
                   float(data.get("wall_s", 0.0)), str(data["file"]) if reduced else None,
                   None if modes is None else tuple(int(m) for m in modes))


@dataclass(frozen=True)
class NaiveAtFinerStep:
    """The naive playback at the finer step, run before a budgeted plan's optimization to time the check.

    Attributes:
        dt_s: the finer step [s].
        naive: its figures.
        wall_s: what the run cost [s] (the time one run of the check needs).
    """

    dt_s: float
    naive: RunFigures
    wall_s: float


@dataclass(frozen=True)
class FinerStepCheck:
    """The naive and optimized profiles re-simulated in the planning model at a finer step (a numerical check).

    Attributes:
        dt_s: the finer step [s]. steps: its steps.
        naive, optimized: the two runs' figures (no ring-out).
        planning_peak_ratio: optimized over naive peak at the planning step.
        wall_s: wall time [s].
    """

    dt_s: float
    steps: int
    naive: RunFigures
    optimized: RunFigures
    planning_peak_ratio: float
    wall_s: float

    @property
    def peak_ratio(self) -> float:
        """Optimized over naive peak deviation at the finer step."""
        return self.optimized.peak_deviation_m / self.naive.peak_deviation_m

    @property
    def holds(self) -> bool:
        """Whether the plan's figure holds at the finer step (:func:`finer_step_holds`)."""
        return finer_step_holds(self.peak_ratio, self.planning_peak_ratio)

    def to_json(self) -> JsonObject:
        return {"dt_s": self.dt_s, "steps": self.steps, "naive": self.naive.to_json(),
                "optimized": self.optimized.to_json(), "peak_ratio": self.peak_ratio,
                "planning_peak_ratio": self.planning_peak_ratio, "holds": self.holds, "wall_s": self.wall_s}

    @classmethod
    def from_json(cls, data: Mapping[str, object]) -> FinerStepCheck:
        return cls(float(data["dt_s"]), int(data["steps"]), RunFigures.from_json(data["naive"]),
                   RunFigures.from_json(data["optimized"]), float(data["planning_peak_ratio"]),
                   float(data.get("wall_s", 0.0)))


class CutStatus(enum.StrEnum):
    """What a plan's checks concluded, the first that applies."""

    #: No optimized variant: nothing was planned.
    NO_RESULT = "no optimized result"
    #: The headline above :data:`MEANINGFUL_CUT`: nothing worth playing was gained.
    NO_CUT = "no meaningful cut"
    #: The optimized motion needs more than the stall torque where the cut is judged.
    BEYOND_STALL = "beyond the servos' torque"
    #: A meaningful cut the servos can drive.
    REACHED = "cut reached"


class ExitStatus(enum.IntEnum):
    """``retarget plan``'s exit status."""

    PLANNED = 0
    BAD_INPUT = 2
    NOT_PLAYABLE = 3


@dataclass(frozen=True)
class Verdict:
    """The headline of a plan and what follows from it.

    Attributes:
        planning_peak_ratio: optimized over naive peak deviation in the planning model (None: no optimized result).
        verified_peak_ratio: the same in the verification model (None: not verified in another model).
        verification_model: that model's description (``"none"``).
        optimized_peak_torque_ratio: the optimized run's peak torque over stall in the planning model.
        judged_torque_ratio: the same where the cut is judged (the verification model's, else the planning
            model's).
    """

    planning_peak_ratio: float | None
    verified_peak_ratio: float | None = None
    verification_model: str = "none"
    optimized_peak_torque_ratio: float = 0.0
    judged_torque_ratio: float = 0.0

    @classmethod
    def no_result(cls) -> Verdict:
        """The verdict on a plan without an optimized variant."""
        return cls(None)

    @property
    def headline(self) -> float | None:
        """Optimized over naive peak where the cut is judged: the verification model's, else the planning model's."""
        return self.verified_peak_ratio if self.verified_peak_ratio is not None else self.planning_peak_ratio

    @property
    def cut_reached(self) -> bool:
        """The headline at most :data:`MEANINGFUL_CUT`."""
        return self.headline is not None and bool(self.headline <= MEANINGFUL_CUT)

    @property
    def within_stall(self) -> bool:
        """The optimized motion's peak torque where the cut is judged within the servos' stall torque."""
        return bool(self.judged_torque_ratio <= 1.0)

    @property
    def status(self) -> CutStatus:
        if self.headline is None:
            return CutStatus.NO_RESULT
        if not self.cut_reached:
            return CutStatus.NO_CUT
        return CutStatus.REACHED if self.within_stall else CutStatus.BEYOND_STALL

    @property
    def _where(self) -> str:
        return (f"in the {self.verification_model}" if self.verified_peak_ratio is not None
                else "in the planning model (not verified elsewhere)")

    @property
    def cut_text(self) -> str:
        """The headline in words, and whether it is a meaningful cut."""
        if self.headline is None:
            return str(CutStatus.NO_RESULT)
        out = f"optimized peak deviation {self.headline:.3f} x naive {self._where}"
        if not self.cut_reached:
            out += (f", above {MEANINGFUL_CUT:g} x: nothing worth playing was gained (try a finer dt, more "
                    "iterations, or a servo-feasible motion)")
        return out

    @property
    def text(self) -> str:
        """The verdict in words (the report's ``cut_verdict``): :attr:`cut_text`, and the torque beyond stall."""
        if self.headline is None or self.within_stall:
            return self.cut_text
        return (f"{self.cut_text}; the optimized motion needs {self.judged_torque_ratio:.2f} x the stall torque "
                f"{self._where}: the servos cannot play it as planned")

    @property
    def execution_refusal(self) -> str:
        """Why the optimized trajectory must not be played on the robot as asked (``""``: it may be).

        A plan judged worse than the input (headline above 1), or one whose optimized motion needs more than the
        stall torque where it is judged, is not played: a plan about as good as the input in its planning model can
        be far worse in another model (a 4-bar driven near its change point can fold onto its other branch there).
        """
        if self.headline is None:
            return ""
        if self.headline > 1.0:
            return f"not executed: the optimized trajectory does worse than the input ({self.text})"
        if not self.within_stall:
            return f"not executed: {self.text}"
        return ""

    @property
    def exit_status(self) -> ExitStatus:
        """``retarget plan``'s exit status: :attr:`ExitStatus.NOT_PLAYABLE` without a meaningful cut or beyond the
        stall torque (the planner node does not play such a plan either)."""
        return ExitStatus.PLANNED if self.status is CutStatus.REACHED else ExitStatus.NOT_PLAYABLE

    @property
    def exit_message(self) -> str:
        """The error line that goes with :attr:`exit_status` ("" when planned)."""
        if self.status is CutStatus.REACHED:
            return ""
        return f"{CutStatus.NO_CUT if self.status is CutStatus.NO_RESULT else self.status}: {self.text}"

    def to_json(self) -> JsonObject:
        if self.headline is None:
            return {"cut_reached": False, "cut_verdict": self.text, "verified_peak_ratio": None}
        return {"planning_peak_ratio": self.planning_peak_ratio, "verified_peak_ratio": self.verified_peak_ratio,
                "verification_model": self.verification_model,
                "optimized_peak_torque_ratio": self.optimized_peak_torque_ratio, "cut_reached": self.cut_reached,
                "cut_verdict": self.text, "within_stall": self.within_stall}


@dataclass(frozen=True)
class PlanChecks:
    """The plan measured in models it was not optimized on, and its :class:`Verdict`.

    Attributes:
        verdict: the headline and what follows from it.
        verify: the finer-step check (None: not run, or skipped: the warnings say why).
        band: the robustness band in the planning model (None: not run).
        verified: the nominal verification in another model (None: not verified elsewhere).
        verified_band: the verification repeated with the parts' stiffness scaled, in the order asked.
        timings_s: wall time of each check [s] (``verify``, ``band``, ``verified`` with its band).
    """

    verdict: Verdict
    verify: FinerStepCheck | None = None
    band: StiffnessBand | None = None
    verified: Verification | None = None
    verified_band: tuple[Verification, ...] = ()
    timings_s: Mapping[str, float] = field(default_factory=dict)

    def to_json(self) -> JsonObject:
        """The report's keys of the checks (merged into the plan's report)."""
        if self.verdict.headline is None:
            return self.verdict.to_json()
        out: JsonObject = {}
        if self.verify is not None:
            out["verify"] = self.verify.to_json()
        if self.band is not None:
            out["band"] = self.band.to_json()
        if self.verified is not None:
            out["verified"] = self.verified.to_json()
        if self.verified_band:
            out["verified_band"] = {stiffness_key(v.stiffness_factor): v.to_json() for v in self.verified_band}
        out["check_timings_s"] = dict(self.timings_s)
        out.update(self.verdict.to_json())
        return out


def band_from_entries(entries: Iterable[BandResult], factors: Iterable[float]) -> StiffnessBand:
    """The band of ``factors``, in that order, from results computed in any order (here and in a worker)."""
    by_factor = {float(r.stiffness_factor): r for r in entries}
    return StiffnessBand(tuple(by_factor[float(f)] for f in factors))

"""The model card: how close each flexible part's bending frequencies are to a mesh-converged reference, and the
per-part stiffness calibration that puts them there.

For every flexible part (clamped at its root interface, :func:`retarget.fem.modal.root_interface`) the card lists
the first two bending frequencies per plane on the model's own mesh with the nominal material (``f_mesh``), after
the stiffness calibration (``f_model`` = f_mesh √c, exact: at fixed ν the rest stiffness is proportional to E),
the mesh-converged reference (Richardson over three refined meshes, :func:`retarget.fem.modal.reference_frequencies`)
and Euler–Bernoulli theory where the part is a rod or a rectangular bar, with the relative errors and the gate
(|f1 error| ≤ 1 %, |f2 error| ≤ 2 % by default).

The calibration (:func:`calibrate_stiffness`, applied by ``load_robot(..., stiffness_calibration=True)``) scales a
generated part's Young's modulus by c = (f1_ref / f1_mesh)², the geometric mean over the two bending planes: a
coarse mesh is uniformly too stiff in bending (f1 and f2 off by about the same fraction), so one factor per part
removes most of the error while the training mesh stays cheap. Parts read from mesh files have no reference and
are not calibrated (the card says "no reference").

With modelled servos the card also lists, per motor, the coupled servo–structure mode (:class:`ServoModeCard`):
the mode of the linearized robot whose strain energy lies most in that motor's servo spring, its frequency,
damping ratio and share, beside a reference (the full FEM for a reduced model, Euler–Bernoulli theory for a rod
on one servo) and the frequency of the structure's own mode it couples to (every servo ideal). The rows are
computed in the simulator's layer (:func:`retarget.sim.servo_modes.servo_card`); this module only holds and
prints them. They are reported, not gated: a row whose error exceeds :data:`SERVO_MODE_WARN` is flagged.
"""
from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields, replace
from typing import TYPE_CHECKING

from retarget.errors import InputError
from retarget.fem.modal import (
    BENDING_PLANES,
    BendingFrequencies,
    Clamp,
    Reference,
    clamp_of,
    euler_bernoulli_bending,
    mesh_frequencies,
    reference_frequencies,
    root_interface,
)
from retarget.jsonsafe import finite_or_none

if TYPE_CHECKING:
    from retarget.model.robot import FlexiblePart, RobotModel

__all__ = [
    "DEFAULT_F1_TOLERANCE",
    "DEFAULT_F2_TOLERANCE",
    "ModeCard",
    "ModelCard",
    "ModelFidelityError",
    "PartCard",
    "SERVO_MODE_WARN",
    "ServoModeCard",
    "calibrate_stiffness",
    "check_fidelity",
    "model_card",
    "stiffness_factor",
]

#: The gate: largest |f_model / f_reference − 1| of the first and of the second bending mode of every plane.
DEFAULT_F1_TOLERANCE: float = 0.01
DEFAULT_F2_TOLERANCE: float = 0.02


#: A coupled servo–structure frequency further than this fraction from its reference is flagged on the card (a
#: warning, not a gate: docs/fem.md "Servo modes").
SERVO_MODE_WARN: float = 0.05


@dataclass(frozen=True)
class ServoModeCard:
    """One motor's coupled servo–structure mode.

    Attributes:
        motor: the motor (joint) name.
        servo: its servo model (``XM430-W210``, …).
        goal: the motor's goal at the linearization's static equilibrium [rad].
        mode: the mode's rank among the model's lowest undamped modes (1: the lowest).
        f_model: its undamped frequency in the model the card is of [Hz].
        model: that model (``"full FEM, 21 094 DOF"``, ``"reduced, 8+8 coordinates"``).
        f_reference: the same motor's coupled frequency in the reference [Hz], None without one.
        reference: the reference (``"full FEM, …"``, ``"Euler-Bernoulli rod on the servo spring …"``, ``"no
            reference"``).
        error: f_model / f_reference − 1, None without a reference.
        damping_ratio: ζ of the mode in the model (the servo's back EMF, derivative gain and friction, the
            structure's Rayleigh damping) [-]; None when no damped mode matches it.
        share: the servo spring's share of the mode's strain energy, ``kp δθ² / δᵀKδ`` [-].
        f_ideal_servo: the structure's own mode it couples to: with every servo ideal, the frequency of the mode most
            like it (largest mass-weighted modal assurance, at least 0.5) [Hz]; None when none is (a mode mostly of
            the servo's rotor on its own spring).
    """

    motor: str
    servo: str
    goal: float
    mode: int
    f_model: float
    model: str
    f_reference: float | None
    reference: str
    error: float | None
    damping_ratio: float | None
    share: float
    f_ideal_servo: float | None

    @property
    def warning(self) -> bool:
        """|error| > :data:`SERVO_MODE_WARN` (False without a reference)."""
        return self.error is not None and abs(self.error) > SERVO_MODE_WARN


@dataclass(frozen=True)
class ModeCard:
    """One bending mode of one part.

    Attributes:
        mode: ``"f1 x"``, ``"f2 y"``, …: mode number and plane (displacement along the part frame's x or y).
        f_mesh: on the model's mesh with the nominal material [Hz].
        f_model: on the model's mesh after the stiffness calibration [Hz] (= f_mesh when not calibrated).
        f_reference: the mesh-converged reference [Hz], None without one.
        f_euler_bernoulli: clamped-free beam theory [Hz], None where it does not apply.
        error_mesh: f_mesh / f_reference − 1, None without a reference.
        error: f_model / f_reference − 1, None without a reference.
        tolerance: the gate on |error|.
    """

    mode: str
    f_mesh: float
    f_model: float
    f_reference: float | None
    f_euler_bernoulli: float | None
    error_mesh: float | None
    error: float | None
    tolerance: float

    @property
    def passed(self) -> bool | None:
        """|error| ≤ tolerance; None without a reference."""
        return None if self.error is None else abs(self.error) <= self.tolerance


@dataclass(frozen=True)
class PartCard:
    """The card of one flexible part.

    Attributes:
        name: the part.
        generator: ``"rod"``, ``"bar"``, ``"plate"`` or ``"file"``.
        resolution: element counts of the model's mesh (empty for a file).
        n_dofs: DOFs of the clamped eigenproblem on the model's mesh.
        clamped_interface: the link of the clamped (root) interface, ``"world"`` for the world.
        stiffness_factor: c applied to the nominal Young's modulus (1.0: not calibrated).
        modes: the first two bending modes per plane.
        reference: how the reference was obtained (or ``"no reference"``).
        reference_levels: the refined meshes: ``{"resolution", "n_dofs", "frequencies": {plane: [f1, f2]}}``.
    """

    name: str
    generator: str
    resolution: Mapping[str, int]
    n_dofs: int
    clamped_interface: str
    stiffness_factor: float
    modes: tuple[ModeCard, ...]
    reference: str
    reference_levels: tuple[Mapping[str, object], ...] = ()

    @property
    def passed(self) -> bool | None:
        """Every mode within its gate; None without a reference."""
        results = [m.passed for m in self.modes]
        if any(r is None for r in results):
            return None
        return all(results)


@dataclass(frozen=True)
class ModelCard:
    """The model card of a robot model: one :class:`PartCard` per flexible part.

    Attributes:
        robot: the model's name.
        parts: per flexible part.
        f1_tolerance, f2_tolerance: the gate the cards were judged with.
        servo_modes: per modelled servo, its coupled servo–structure mode (empty: not computed, or every motor
            ideal). Not part of the gate.
    """

    robot: str
    parts: tuple[PartCard, ...]
    f1_tolerance: float = DEFAULT_F1_TOLERANCE
    f2_tolerance: float = DEFAULT_F2_TOLERANCE
    servo_modes: tuple[ServoModeCard, ...] = ()

    @property
    def passed(self) -> bool:
        """No part fails the gate (parts without a reference do not fail it; see ``unchecked``)."""
        return all(p.passed is not False for p in self.parts)

    @property
    def unchecked(self) -> list[str]:
        """Parts without a reference (meshes read from files)."""
        return [p.name for p in self.parts if p.passed is None]

    @property
    def servo_warnings(self) -> list[str]:
        """Motors whose coupled servo–structure frequency is off its reference by more than
        :data:`SERVO_MODE_WARN`."""
        return [m.motor for m in self.servo_modes if m.warning]

    def to_dict(self) -> dict[str, object]:
        """A JSON-able dict (no NaN: missing values are None)."""
        out = {
            "robot": self.robot,
            "f1_tolerance": self.f1_tolerance,
            "f2_tolerance": self.f2_tolerance,
            "passed": self.passed,
            "unchecked": self.unchecked,
            "parts": [],
        }
        for p in self.parts:
            d = asdict(p)
            d["resolution"] = dict(p.resolution)
            d["passed"] = p.passed
            for m, md in zip(p.modes, d["modes"]):
                md["passed"] = m.passed
            out["parts"].append(d)
        if self.servo_modes:
            out["servo_mode_warn"] = SERVO_MODE_WARN
            out["servo_modes"] = [{**asdict(m), "warning": m.warning} for m in self.servo_modes]
        return finite_or_none(out)

    def to_json(self) -> str:
        """Strict JSON (``allow_nan=False``)."""
        return json.dumps(self.to_dict(), allow_nan=False)

    @classmethod
    def from_dict(cls, data: Mapping[str, object]) -> ModelCard:
        """The card from :meth:`to_dict`'s output (e.g. an artifact's metadata)."""
        parts = []
        for p in data["parts"]:
            modes = tuple(
                ModeCard(m["mode"], m["f_mesh"], m["f_model"], m["f_reference"], m["f_euler_bernoulli"],
                         m["error_mesh"], m["error"], m["tolerance"])
                for m in p["modes"]
            )
            parts.append(PartCard(p["name"], p["generator"], dict(p["resolution"]), int(p["n_dofs"]),
                                  p["clamped_interface"], float(p["stiffness_factor"]), modes, p["reference"],
                                  tuple(p.get("reference_levels") or ())))
        servo_fields = [f.name for f in fields(ServoModeCard)]
        servo = tuple(ServoModeCard(**{k: m[k] for k in servo_fields}) for m in data.get("servo_modes") or ())
        return cls(str(data["robot"]), tuple(parts), float(data["f1_tolerance"]), float(data["f2_tolerance"]),
                   servo)

    def format(self) -> str:
        """A short table: per part and mode, f_model, f_reference, error, Euler–Bernoulli (a robot without flexible
        parts: one line saying so, then its servo modes)."""
        if not self.parts:
            lines = [f"model card of {self.robot}: no flexible part (rigid links only), nothing to gate"]
            return "\n".join(lines + (self._format_servo_modes() if self.servo_modes else []))
        lines = [f"model card of {self.robot} (gate |f1 error| <= {100 * self.f1_tolerance:g} %, "
                 f"|f2 error| <= {100 * self.f2_tolerance:g} %)"]
        lines.append(f"  {'part':<16} {'mesh':<14} {'DOF':>7} {'c':>7} {'mode':<5} {'f_mesh':>9} {'f_model':>9} "
                     f"{'f_ref':>9} {'error':>8} {'EB':>9}  result")
        for p in self.parts:
            res = "x".join(str(v) for v in p.resolution.values()) or p.generator
            for k, m in enumerate(p.modes):
                head = (f"  {p.name:<16} {p.generator + ' ' + res:<14} {p.n_dofs:>7} {p.stiffness_factor:>7.4f}"
                        if k == 0 else f"  {'':<16} {'':<14} {'':>7} {'':>7}")
                ref = f"{m.f_reference:9.3f}" if m.f_reference is not None else f"{'-':>9}"
                err = f"{100 * m.error:+7.2f}%" if m.error is not None else f"{'-':>8}"
                eb = f"{m.f_euler_bernoulli:9.3f}" if m.f_euler_bernoulli is not None else f"{'-':>9}"
                verdict = {True: "pass", False: "FAIL", None: "no reference"}[m.passed]
                lines.append(f"{head} {m.mode:<5} {m.f_mesh:9.3f} {m.f_model:9.3f} {ref} {err} {eb}  {verdict}")
        verdict = "every part within the gate" if self.passed else "FAILS the gate"
        if self.unchecked:
            verdict += f"; no reference for {', '.join(self.unchecked)}"
        lines.append(f"  {verdict} (frequencies [Hz], clamped at the root interface; c: stiffness factor)")
        if self.servo_modes:
            lines += self._format_servo_modes()
        return "\n".join(lines)

    def _format_servo_modes(self) -> list[str]:
        """The servo rows of :meth:`format`."""
        lines = ["  coupled servo-structure modes (per motor the mode with the most strain energy in its servo "
                 f"spring; warned beyond {100 * SERVO_MODE_WARN:g} %, not gated)"]
        lines.append(f"  {'motor':<21} {'servo':<12} {'goal':>7} {'mode':>4} {'f_model':>9} {'f_ref':>9} {'error':>8} "
                     f"{'zeta':>6} {'share':>6} {'f_ideal':>9}")
        models, references = [], []
        for m in self.servo_modes:
            ref = f"{m.f_reference:9.3f}" if m.f_reference is not None else f"{'-':>9}"
            err = f"{100 * m.error:+7.2f}%" if m.error is not None else f"{'-':>8}"
            zeta = f"{m.damping_ratio:6.3f}" if m.damping_ratio is not None else f"{'-':>6}"
            ideal = f"{m.f_ideal_servo:9.3f}" if m.f_ideal_servo is not None else f"{'-':>9}"
            lines.append(f"  {m.motor:<21} {m.servo:<12} {m.goal:7.3f} {m.mode:>4} {m.f_model:9.3f} {ref} {err} "
                         f"{zeta} {m.share:6.3f} {ideal}{'  WARNING' if m.warning else ''}")
            models += [m.model] if m.model not in models else []
            references += [m.reference] if m.reference not in references else []
        lines.append(f"  model: {'; '.join(models)}; reference: {'; '.join(references)} (goal [rad]; f_ideal: the "
                     "structure's own mode, every servo ideal)")
        if self.servo_warnings:
            lines.append(f"  WARNING: the coupled frequency of {', '.join(self.servo_warnings)} is more than "
                         f"{100 * SERVO_MODE_WARN:g} % from its reference")
        return lines


class ModelFidelityError(InputError):
    """A flexible part's bending frequency is outside the fidelity gate.

    Attributes:
        part: the part's name.
        mode: the mode (``"f1 x"``, …).
        f_model: the model's frequency [Hz].
        f_reference: the mesh-converged reference [Hz].
        error: f_model / f_reference − 1.
        tolerance: the gate on |error|.
    """

    def __init__(self, robot: str, part: str, mode: str, f_model: float, f_reference: float, error: float,
                 tolerance: float) -> None:
        super().__init__(
            f"model fidelity: {robot} flexible part {part!r}, bending mode {mode}: f_model {f_model:.4f} Hz vs "
            f"mesh-converged reference {f_reference:.4f} Hz ({100 * error:+.2f} %, gate ±{100 * tolerance:g} %). "
            "Fix: a finer mesh for this part (`retarget plan --mesh-axial/--mesh-around`, `retarget reduce "
            "--mesh-scale`); generated meshes are stiffness-calibrated by default, which corrects f1, not a mesh too "
            "coarse for the higher modes. `retarget check model ROBOT` prints the card. To plan on it anyway: "
            "`retarget plan --allow-unverified-model` (planner node parameter allow_unverified_model)."
        )
        self.part, self.mode, self.f_model, self.f_reference = part, mode, f_model, f_reference
        self.error, self.tolerance = error, tolerance


def check_fidelity(card: ModelCard, f1_tol: float = DEFAULT_F1_TOLERANCE, f2_tol: float = DEFAULT_F2_TOLERANCE
                   ) -> None:
    """Raise :class:`ModelFidelityError` for the worst mode (relative to its tolerance) outside the gate.

    Parts without a reference are not judged (``card.unchecked`` lists them).
    """
    worst: tuple[float, PartCard, ModeCard, float] | None = None
    for p in card.parts:
        for m in p.modes:
            if m.error is None:
                continue
            tol = f1_tol if m.mode.startswith("f1") else f2_tol
            excess = abs(m.error) / tol
            if excess > 1.0 and (worst is None or excess > worst[0]):
                worst = (excess, p, m, tol)
    if worst is not None:
        _, p, m, tol = worst
        assert m.f_reference is not None and m.error is not None
        raise ModelFidelityError(card.robot, p.name, m.mode, m.f_model, m.f_reference, m.error, tol)


def _part_reference(
    model: RobotModel, part: FlexiblePart
) -> tuple[int, Clamp, Reference | None, BendingFrequencies | None]:
    """(root interface index, its clamp, the reference or None, Euler–Bernoulli or None) of a part."""
    root = root_interface(model, part)
    clamp = clamp_of(part, root)
    if part.generator is None:
        return root, clamp, None, None
    material = part.nominal_material
    return (root, clamp, reference_frequencies(part.generator, material, clamp),
            euler_bernoulli_bending(part.generator, material, clamp))


def stiffness_factor(f_mesh: Mapping[str, tuple[float, ...]], f_reference: Mapping[str, tuple[float, ...]]) -> float:
    """c = (f1_ref / f1_mesh)², the ratio being the geometric mean over the bending planes, rounded to 6
    significant digits (the factor enters the hashes of trained models: round-off must not make them stale)."""
    ratios = [f_reference[p][0] / f_mesh[p][0] for p in BENDING_PLANES]
    return float(f"{math.prod(ratios) ** (2.0 / len(ratios)):.6g}")


def calibrate_stiffness(model: RobotModel) -> RobotModel:
    """The model with each generated part's Young's modulus scaled by its :func:`stiffness_factor`.

    Parts without a generator (mesh files) are unchanged (factor 1). The part's ``material`` becomes the scaled
    one (Lamé parameters and the Rayleigh β K term scale with it), ``stiffness_factor`` records c.
    """
    parts = []
    for part in model.flexible_parts:
        if part.generator is None:
            parts.append(part)
            continue
        root, _, ref, _ = _part_reference(model, part)
        nominal = part.nominal_material
        c = stiffness_factor(mesh_frequencies(part, root, nominal).frequencies, ref.frequencies.frequencies)
        scaled = replace(nominal, youngs_modulus=nominal.youngs_modulus * c)
        parts.append(replace(part, material=scaled, stiffness_factor=c))
    return replace(model, flexible_parts=tuple(parts))


def model_card(
    model: RobotModel, f1_tol: float = DEFAULT_F1_TOLERANCE, f2_tol: float = DEFAULT_F2_TOLERANCE
) -> ModelCard:
    """The :class:`ModelCard` of a :class:`retarget.model.RobotModel` (its meshes, materials and factors).

    References and mesh frequencies are cached on disk (:func:`retarget.fem.modal.cards_dir`); the first card of
    a new part costs seconds to a minute.
    """
    cards = []
    for part in model.flexible_parts:
        root, clamp, ref, eb = _part_reference(model, part)
        raw = mesh_frequencies(part, root, part.nominal_material)
        scale = math.sqrt(part.stiffness_factor)
        modes = []
        for k in range(2):
            for p in BENDING_PLANES:
                f_mesh = raw.frequencies[p][k]
                f_ref = ref.frequencies.frequencies[p][k] if ref is not None else None
                modes.append(ModeCard(
                    f"f{k + 1} {p}", f_mesh, f_mesh * scale, f_ref,
                    eb.frequencies[p][k] if eb is not None else None,
                    None if f_ref is None else f_mesh / f_ref - 1.0,
                    None if f_ref is None else f_mesh * scale / f_ref - 1.0,
                    f1_tol if k == 0 else f2_tol,
                ))
        link = part.interfaces[root].link
        gen = part.generator
        if ref is None:
            how = "no reference"
        else:
            orders = ", ".join(f"{p}: {o[0]:.2f}/{o[1]:.2f}" for p, o in ref.orders.items())
            how = (f"Richardson over {len(ref.levels)} refined {gen.kind} meshes "
                   f"(largest {ref.levels[-1]['n_dofs']} DOF; observed orders f1/f2 {orders})")
        cards.append(PartCard(
            part.name, gen.kind if gen is not None else "file", dict(gen.resolution) if gen is not None else {},
            raw.n_dofs, link if link is not None else "world", float(part.stiffness_factor), tuple(modes), how,
            ref.levels if ref is not None else (),
        ))
    return ModelCard(model.name, tuple(cards), f1_tol, f2_tol)

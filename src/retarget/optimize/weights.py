"""Weights of the objective: numbers or functions of time, per tracked body, from the robot YAML or the command line.

A weight (:class:`WeightSchedule`) is constant, piecewise constant (``step``) or a shape-preserving cubic through
points (``spline``, PCHIP: it never overshoots, so non-negative points give a non-negative weight); it is held
constant before the first and after the last point. Weights are *data* for the optimizer: no derivative w.r.t. time
or the parameters is ever needed.

Tracked bodies (:class:`TrackedBodyWeights`) come from the robot YAML (``retarget.tracked_bodies``)::

    tracked_bodies:
      - {link: tip_mass, position_weight: 1.0}
      - link: glass
        position_weight: {step: [[0.0, 1.0], [2.0, 100.0], [3.0, 1.0]]}   # [t [s], w] points
        orientation_weight: {spline: [[0.0, 0.0], [1.0, 1.0]]}

and from the command line, one option value per body (:func:`parse_weight_option`)::

    LINK:pos=WEIGHT[,ori=WEIGHT]        WEIGHT = 1.5 | step(t:w, t:w, ...) | spline(t:w, t:w, ...)
    tip_mass:pos=1.0,ori=0.1
    glass:ori=step(0:0, 2.5:10)

A command-line entry overrides only the keys it names for a link already in the YAML and adds the link otherwise
(defaults ``pos=1``, ``ori=0``, as in the robot description). Units: positions are compared in [m] and rotation
axes are unit vectors, so ``pos`` weighs [1/(m² s)] and ``ori`` [1/s] against the integrated objective.
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np
from numpy.typing import ArrayLike, NDArray

from retarget.optimize.errors import WeightSyntaxError

__all__ = [
    "SCHEDULE_KINDS",
    "TrackedBodyWeights",
    "WeightSchedule",
    "WeightSpec",
    "merge_tracked_weights",
    "parse_tracked_bodies",
    "parse_weight_option",
]

#: Kinds of :class:`WeightSchedule`.
SCHEDULE_KINDS: tuple[str, ...] = ("constant", "step", "spline")


@dataclass(frozen=True, eq=False)
class WeightSchedule:
    """A weight as a function of time.

    Attributes:
        kind: ``"constant"``, ``"step"`` (piecewise constant: ``values[i]`` from ``times[i]`` until
            ``times[i + 1]``; ``values[0]`` before ``times[0]``) or ``"spline"`` (PCHIP through the points, held
            outside them).
        times: Breakpoints [s], strictly increasing, shape ``(k,)`` (``(1,)`` placeholder for constants).
        values: Weights, non-negative and finite, shape ``(k,)``.
    """

    kind: str
    times: NDArray[np.float64]
    values: NDArray[np.float64]

    def __post_init__(self) -> None:
        if self.kind not in SCHEDULE_KINDS:
            raise WeightSyntaxError(f"unknown weight schedule kind {self.kind!r}; use one of {list(SCHEDULE_KINDS)}")
        t = np.atleast_1d(np.asarray(self.times, dtype=np.float64))
        v = np.atleast_1d(np.asarray(self.values, dtype=np.float64))
        if t.ndim != 1 or t.shape != v.shape or t.size == 0:
            raise WeightSyntaxError(f"a {self.kind} schedule needs as many times as values, got {t.size} and "
                                    f"{v.size}")
        if not (np.all(np.isfinite(t)) and np.all(np.isfinite(v))):
            raise WeightSyntaxError("weight schedule times and values must be finite numbers")
        if np.any(v < 0):
            raise WeightSyntaxError(f"weights must be non-negative, got {v.tolist()}")
        if np.any(np.diff(t) <= 0):
            raise WeightSyntaxError(f"schedule times must strictly increase, got {t.tolist()}")
        if self.kind == "constant" and t.size != 1:
            raise WeightSyntaxError("a constant schedule has exactly one value")
        t.setflags(write=False)
        v.setflags(write=False)
        object.__setattr__(self, "times", t)
        object.__setattr__(self, "values", v)

    @classmethod
    def constant(cls, value: float) -> WeightSchedule:
        """The weight ``value`` at all times."""
        return cls("constant", np.zeros(1), np.array([float(value)]))

    @classmethod
    def step(cls, points: Sequence[tuple[float, float]]) -> WeightSchedule:
        """Piecewise constant from ``[(t [s], w), …]``."""
        t, w = _split_points(points)
        return cls("step", t, w)

    @classmethod
    def spline(cls, points: Sequence[tuple[float, float]]) -> WeightSchedule:
        """PCHIP through ``[(t [s], w), …]``."""
        t, w = _split_points(points)
        return cls("spline", t, w)

    @property
    def is_zero(self) -> bool:
        """Whether the weight vanishes at all times (then the term can be skipped)."""
        return bool(np.all(self.values == 0.0))

    def __call__(self, t: ArrayLike) -> NDArray[np.float64]:
        """The weight at times ``t`` [s], same shape as ``t``."""
        tt = np.asarray(t, dtype=np.float64)
        if self.kind == "constant" or self.values.size == 1:
            return np.full(tt.shape, self.values[0])
        if self.kind == "step":
            idx = np.clip(np.searchsorted(self.times, tt, side="right") - 1, 0, self.values.size - 1)
            return self.values[idx]
        from scipy.interpolate import PchipInterpolator

        clipped = np.clip(tt, self.times[0], self.times[-1])
        return np.asarray(PchipInterpolator(self.times, self.values)(clipped), dtype=np.float64)

    def to_yaml(self) -> float | dict[str, list[list[float]]]:
        """The YAML form :meth:`parse` reads back."""
        if self.kind == "constant":
            return float(self.values[0])
        return {self.kind: [[float(a), float(b)] for a, b in zip(self.times, self.values)]}

    def to_text(self) -> str:
        """The command-line form :meth:`parse` reads back (``1.5``, ``step(0:1, 2:100)``)."""
        if self.kind == "constant":
            return f"{self.values[0]:g}"
        return f"{self.kind}(" + ", ".join(f"{a:g}:{b:g}" for a, b in zip(self.times, self.values)) + ")"

    @classmethod
    def parse(cls, spec: object) -> WeightSchedule:
        """A schedule from YAML data or command-line text.

        Accepted forms::

            1.5                                   # a number (YAML) or "1.5" (text): constant
            {step: [[0.0, 1.0], [2.0, 100.0]]}    # YAML mapping: piecewise constant from [t [s], w] points
            {spline: [[0.0, 1.0], [2.0, 100.0]]}  # YAML mapping: PCHIP through the points
            "step(0:1, 2:100, 3:1)"               # text: t:w pairs, same meaning
            "spline(0:1, 2:100)"

        Raises:
            WeightSyntaxError: Naming the offending text.
        """
        if isinstance(spec, WeightSchedule):
            return spec
        if isinstance(spec, bool):
            raise WeightSyntaxError("a weight must be a number or a schedule, not a boolean", spec)
        if isinstance(spec, (int, float)):
            return cls.constant(float(spec))
        if isinstance(spec, Mapping):
            if len(spec) != 1:
                raise WeightSyntaxError("a weight schedule mapping has exactly one key, 'step' or 'spline'", spec)
            ((kind, points),) = spec.items()
            if kind == "constant":
                return cls.constant(_number(points, spec))
            if kind not in ("step", "spline"):
                raise WeightSyntaxError(f"unknown weight schedule {kind!r}; use 'step' or 'spline'", spec)
            if not isinstance(points, Sequence) or isinstance(points, str) or not points:
                raise WeightSyntaxError(f"'{kind}' needs a list of [time, weight] points", spec)
            pairs = []
            for p in points:
                if not isinstance(p, Sequence) or isinstance(p, str) or len(p) != 2:
                    raise WeightSyntaxError(f"'{kind}' point {p!r} is not a [time, weight] pair", spec)
                pairs.append((_number(p[0], spec), _number(p[1], spec)))
            return cls(kind, *_split_points(pairs, spec))
        if isinstance(spec, str):
            return cls._parse_text(spec.strip())
        raise WeightSyntaxError(f"a weight must be a number or a schedule, got {type(spec).__name__}", spec)

    @classmethod
    def _parse_text(cls, text: str) -> WeightSchedule:
        if "(" not in text:
            return cls.constant(_number(text, text))
        kind, _, rest = text.partition("(")
        kind = kind.strip()
        if kind not in ("step", "spline") or not rest.endswith(")"):
            raise WeightSyntaxError("a weight is a number, step(t:w, ...) or spline(t:w, ...)", text)
        pairs = []
        for item in rest[:-1].split(","):
            t, sep, w = item.partition(":")
            if not sep:
                raise WeightSyntaxError(f"schedule point {item.strip()!r} is not time:weight", text)
            pairs.append((_number(t, text), _number(w, text)))
        return cls(kind, *_split_points(pairs, text))


def _number(value: object, context: object) -> float:
    if isinstance(value, bool):
        raise WeightSyntaxError("expected a number, got a boolean", context)
    try:
        out = float(value.strip() if isinstance(value, str) else value)
    except (TypeError, ValueError):
        raise WeightSyntaxError(f"{value!r} is not a number", context) from None
    if not math.isfinite(out):
        raise WeightSyntaxError(f"{value!r} is not a finite number", context)
    return out


def _split_points(points: Sequence[tuple[float, float]],
                  context: object = None) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    arr = np.asarray(points, dtype=np.float64)
    if arr.ndim != 2 or arr.shape[1] != 2 or arr.shape[0] == 0:
        raise WeightSyntaxError("a schedule needs one or more (time, weight) points", context or points)
    return arr[:, 0].copy(), arr[:, 1].copy()


#: What :meth:`WeightSchedule.parse` reads: a number, command-line text, a YAML schedule mapping or a schedule.
WeightSpec = float | str | Mapping[str, object] | WeightSchedule


@dataclass(frozen=True)
class TrackedBodyWeights:
    """How much the optimizer cares about one rigid link's global position and orientation over time.

    Attributes:
        link: URDF link name.
        position: Weight of ``½|c − c̄|²`` [1/(m² s)].
        orientation: Weight of ``½ Σ_axes |r − r̄|²`` [1/s].
    """

    link: str
    position: WeightSchedule
    orientation: WeightSchedule

    def sample(self, times: ArrayLike) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        """``(w_pos, w_ori)`` at ``times`` [s], each shaped like ``times``."""
        return self.position(times), self.orientation(times)


_KEYS = {"pos": "position", "position": "position", "ori": "orientation", "orientation": "orientation"}


def parse_tracked_bodies(entries: Iterable[Mapping[str, object]] | None) -> list[TrackedBodyWeights]:
    """Tracked bodies from the robot YAML's ``retarget.tracked_bodies`` list.

    Args:
        entries: Mappings with ``link`` and optional ``position_weight`` (default 1) and ``orientation_weight``
            (default 0), each a number or a schedule mapping (see :meth:`WeightSchedule.parse`).

    Raises:
        WeightSyntaxError: On a malformed entry, an unknown key or a duplicated link.
    """
    out: list[TrackedBodyWeights] = []
    for i, entry in enumerate(entries or []):
        if not isinstance(entry, Mapping) or not isinstance(entry.get("link"), str) or not entry["link"]:
            raise WeightSyntaxError(f"tracked_bodies[{i}] needs a 'link' name", entry)
        unknown = set(entry) - {"link", "position_weight", "orientation_weight"}
        if unknown:
            raise WeightSyntaxError(f"tracked_bodies[{i}] has unknown keys {sorted(unknown)}; expected link, "
                                    "position_weight, orientation_weight", entry)
        if any(b.link == entry["link"] for b in out):
            raise WeightSyntaxError(f"link {entry['link']!r} is tracked twice", entry)
        out.append(TrackedBodyWeights(entry["link"], WeightSchedule.parse(entry.get("position_weight", 1.0)),
                                      WeightSchedule.parse(entry.get("orientation_weight", 0.0))))
    return out


def _split_top_level(text: str) -> list[str]:
    """Split at commas outside parentheses."""
    parts, depth, current = [], 0, []
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
            if depth < 0:
                raise WeightSyntaxError("unbalanced parentheses", text)
        if ch == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(ch)
    if depth != 0:
        raise WeightSyntaxError("unbalanced parentheses", text)
    parts.append("".join(current))
    return parts


def parse_weight_option(text: str) -> tuple[str, dict[str, WeightSchedule]]:
    """One command-line weight option: ``LINK:pos=WEIGHT[,ori=WEIGHT]``.

    Returns:
        ``(link, {"position": …, "orientation": …})`` with only the keys given.

    Raises:
        WeightSyntaxError: Naming the text and what is wrong.
    """
    link, sep, rest = text.partition(":")
    link = link.strip()
    if not sep or not link or not rest.strip():
        raise WeightSyntaxError("expected LINK:pos=WEIGHT[,ori=WEIGHT]", text)
    given: dict[str, WeightSchedule] = {}
    for item in _split_top_level(rest):
        key, eq, value = item.partition("=")
        key = key.strip()
        if not eq or key not in _KEYS:
            raise WeightSyntaxError(f"{item.strip()!r} is not pos=WEIGHT or ori=WEIGHT", text)
        if _KEYS[key] in given:
            raise WeightSyntaxError(f"{_KEYS[key]} weight given twice", text)
        given[_KEYS[key]] = WeightSchedule.parse(value)
    return link, given


def merge_tracked_weights(base: Sequence[TrackedBodyWeights], options: Iterable[str]) -> list[TrackedBodyWeights]:
    """Apply command-line weight options (see :func:`parse_weight_option`) on top of the YAML's tracked bodies.

    A named key replaces that weight of an existing link; an unknown link is appended with defaults ``pos=1``,
    ``ori=0`` for the keys not given. The YAML order is kept.
    """
    out = list(base)
    for text in options:
        link, given = parse_weight_option(text)
        for i, body in enumerate(out):
            if body.link == link:
                out[i] = replace(body, **given)
                break
        else:
            out.append(TrackedBodyWeights(link, given.get("position", WeightSchedule.constant(1.0)),
                                          given.get("orientation", WeightSchedule.constant(0.0))))
    return out

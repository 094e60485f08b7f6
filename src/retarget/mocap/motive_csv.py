"""Import of OptiTrack Motive CSV exports (format versions 1.21-1.23) as SI time series.

Layout of an export::

    Format Version,1.23,Take Name,...,Rotation Type,Quaternion,Length Units,Millimeters,...   (key,value pairs)
    <blank>
    [,]Type,   Rigid Body,Rigid Body,...,Marker,...          (1.21 leaves the label column empty)
    [,]Name,   tip,tip,...
    [,]ID,     <GUID>,...
    [,]Parent, ...                                           (optional)
    ,,         Rotation,Rotation,...,Position,...,Mean Marker Error
    Frame,Time (Seconds), X,Y,Z,W, X,Y,Z, ...
    0,0.000000,...                                           (empty cells: occluded → NaN)

Positions and marker errors are converted from the export's length unit to metres; orientations become unit
quaternions ``(x, y, z, w)``. Euler exports (``Rotation Type`` XYZ, ZYX, ...) are in degrees and read as intrinsic
rotations in the named order (Motive's documentation does not state intrinsic vs extrinsic; no Euler export was
available to check, so treat Euler imports as unverified).
"""
from __future__ import annotations

import csv
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

from retarget.mocap.errors import MotiveCsvError

__all__ = ["MotiveHeader", "RigidBodyTrack", "MarkerTrack", "MotiveTake", "read_motive_csv", "SUPPORTED_FORMATS"]

SUPPORTED_FORMATS = ("1.21", "1.22", "1.23")
_LENGTH_SCALE = {"meters": 1.0, "centimeters": 0.01, "millimeters": 0.001}
_EULER_ORDERS = ("XYZ", "XZY", "YXZ", "YZX", "ZXY", "ZYX")
_BODY_TYPES = ("Rigid Body", "Bone")
_MARKER_TYPES = ("Marker", "Rigid Body Marker", "Bone Marker")
_ERROR_PROPERTIES = ("Mean Marker Error", "Error Per Marker")


@dataclass(frozen=True)
class MotiveHeader:
    """The first row of an export.

    Attributes:
        format_version: e.g. "1.23".
        take_name: take name.
        capture_frame_rate_hz, export_frame_rate_hz: [Hz].
        rotation_type: "Quaternion" or an Euler order ("XYZ", ...).
        length_units: "Meters", "Centimeters" or "Millimeters" (as written).
        coordinate_space: "Global" or "Local".
        capture_start_time: as written by Motive (local time, locale-dependent).
        fields: every key/value pair of the row.
    """

    format_version: str
    take_name: str
    capture_frame_rate_hz: float
    export_frame_rate_hz: float
    rotation_type: str
    length_units: str
    coordinate_space: str
    capture_start_time: str
    fields: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class RigidBodyTrack:
    """A rigid body (or skeleton bone) over time; NaN rows where it was not tracked.

    Attributes:
        name: asset name. id: Motive's asset id (GUID or number) as written. kind: "Rigid Body" or "Bone".
        position_m: pivot positions [m], ``(n, 3)``.
        orientation_xyzw: unit quaternions, ``(n, 4)``.
        mean_error_m: mean marker error [m], ``(n,)``, or ``None`` if not exported.
    """

    name: str
    id: str
    kind: str
    position_m: NDArray[np.float64]
    orientation_xyzw: NDArray[np.float64]
    mean_error_m: NDArray[np.float64] | None = None

    @property
    def tracked(self) -> NDArray[np.bool_]:
        """Per frame, whether position and orientation are known, ``(n,)``."""
        return np.isfinite(self.position_m).all(axis=1) & np.isfinite(self.orientation_xyzw).all(axis=1)


@dataclass(frozen=True)
class MarkerTrack:
    """A marker over time; NaN rows where it was occluded.

    Attributes:
        name: marker name ("Unlabeled 1036", "tip:Marker1", ...). id: as written. kind: column type.
        position_m: positions [m], ``(n, 3)``.
        quality: Motive's marker quality in [0, 1], ``(n,)``, or ``None`` if not exported.
    """

    name: str
    id: str
    kind: str
    position_m: NDArray[np.float64]
    quality: NDArray[np.float64] | None = None


@dataclass(frozen=True)
class MotiveTake:
    """A whole export.

    Attributes:
        header: the header row.
        frame: frame numbers, ``(n,)``.
        time_s: frame times [s] from the take start, ``(n,)``.
        rigid_bodies: by name, in column order.
        markers: by name (made unique with ``#2``, ``#3`` suffixes if Motive repeats one), in column order.
    """

    header: MotiveHeader
    frame: NDArray[np.int64]
    time_s: NDArray[np.float64]
    rigid_bodies: dict[str, RigidBodyTrack]
    markers: dict[str, MarkerTrack]


def read_motive_csv(path: Path | str) -> MotiveTake:
    """Read a Motive CSV export.

    Raises:
        MotiveCsvError: unreadable header, unsupported format/rotation/unit, inconsistent rows, or an export with
            no rigid-body or marker columns.
    """
    path = Path(path)
    try:
        with path.open(newline="", encoding="utf-8-sig") as stream:
            rows = list(csv.reader(stream))
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise MotiveCsvError(path, f"cannot read: {exc}") from None
    header = _parse_header(path, rows)
    frame_row = next((i for i, r in enumerate(rows) if r and r[0].strip() == "Frame"), None)
    if frame_row is None:
        raise MotiveCsvError(path, "no 'Frame,Time' row: not a Motive CSV export (or truncated header)")
    labels = _descriptor_rows(path, rows, frame_row)
    columns = _columns(path, rows, labels, frame_row)
    if not columns:
        raise MotiveCsvError(
            path,
            "no rigid body or marker columns: the take was exported without assets or markers "
            "(enable 'Rigid Bodies' and/or 'Markers' in Motive's CSV export options)",
        )
    data = _numeric_rows(path, rows, frame_row + 1, len(rows[frame_row]))
    scale = _LENGTH_SCALE[header.length_units.lower()]
    frames = data[:, 0]
    if np.any(~np.isfinite(frames)) or np.any(~np.isfinite(data[:, 1])):
        bad = int(np.flatnonzero(~np.isfinite(frames) | ~np.isfinite(data[:, 1]))[0])
        raise MotiveCsvError(path, "frame number or time missing", line=frame_row + 2 + bad)
    bodies, markers = _tracks(path, header, columns, data, scale)
    return MotiveTake(header, frames.astype(np.int64), data[:, 1].copy(), bodies, markers)


def _parse_header(path: Path, rows: list[list[str]]) -> MotiveHeader:
    if not rows or not rows[0] or rows[0][0].strip() != "Format Version":
        raise MotiveCsvError(path, "first row must start with 'Format Version': not a Motive CSV export", line=1)
    cells = rows[0]
    fields = {cells[i].strip(): cells[i + 1].strip() for i in range(0, len(cells) - 1, 2) if cells[i].strip()}
    version = fields.get("Format Version", "")
    if version not in SUPPORTED_FORMATS:
        raise MotiveCsvError(
            path, f"format version {version!r} not supported (supported: {', '.join(SUPPORTED_FORMATS)})", line=1
        )
    rotation = fields.get("Rotation Type", "Quaternion")
    if rotation != "Quaternion" and rotation not in _EULER_ORDERS:
        raise MotiveCsvError(
            path, f"rotation type {rotation!r} not supported (Quaternion or one of {', '.join(_EULER_ORDERS)})", 1
        )
    units = fields.get("Length Units", "Meters")
    if units.lower() not in _LENGTH_SCALE:
        raise MotiveCsvError(path, f"length units {units!r} not supported (Meters, Centimeters, Millimeters)", 1)

    def rate(key: str) -> float:
        try:
            return float(fields.get(key, "nan"))
        except ValueError:
            raise MotiveCsvError(path, f"{key} {fields[key]!r} is not a number", line=1) from None

    return MotiveHeader(
        format_version=version,
        take_name=fields.get("Take Name", ""),
        capture_frame_rate_hz=rate("Capture Frame Rate"),
        export_frame_rate_hz=rate("Export Frame Rate"),
        rotation_type=rotation,
        length_units=units,
        coordinate_space=fields.get("Coordinate Space", "Global"),
        capture_start_time=fields.get("Capture Start Time", ""),
        fields=fields,
    )


def _descriptor_rows(path: Path, rows: list[list[str]], frame_row: int) -> dict[str, int]:
    """Row index of Type, Name, ID, Parent (optional) and the property row, by label or by position."""
    start = 1
    while start < frame_row and not any(c.strip() for c in rows[start]):
        start += 1
    candidates = list(range(start, frame_row))
    labelled = {rows[i][1].strip(): i for i in candidates if len(rows[i]) > 1 and rows[i][1].strip()}
    if "Type" in labelled and "Name" in labelled:
        out = {k: labelled[k] for k in ("Type", "Name", "ID", "Parent") if k in labelled}
        rest = [i for i in candidates if i not in out.values()]
        if rest:
            out["Property"] = rest[-1]
        return out
    # 1.21 leaves the label column empty: Type, Name, ID, [Parent,] Property in that order.
    if len(candidates) == 4:
        return dict(zip(("Type", "Name", "ID", "Property"), candidates))
    if len(candidates) == 5:
        return dict(zip(("Type", "Name", "ID", "Parent", "Property"), candidates))
    raise MotiveCsvError(
        path, f"expected 4 or 5 descriptor rows (Type, Name, ID, [Parent,] property) before 'Frame', "
        f"found {len(candidates)}", line=start + 1,
    )


@dataclass
class _Column:
    index: int
    kind: str
    name: str
    asset_id: str
    prop: str
    axis: str


def _columns(path: Path, rows: list[list[str]], labels: dict[str, int], frame_row: int) -> list[_Column]:
    width = len(rows[frame_row])

    def cell(row: str, j: int) -> str:
        i = labels.get(row)
        if i is None or j >= len(rows[i]):
            return ""
        return rows[i][j].strip()

    out = []
    for j in range(2, width):
        kind = cell("Type", j)
        if not kind:
            continue
        name = cell("Name", j)
        if not name:
            raise MotiveCsvError(path, f"column {j + 1} of type {kind!r} has no name", line=labels["Name"] + 1)
        out.append(_Column(j, kind, name, cell("ID", j), cell("Property", j), rows[frame_row][j].strip()))
    return out


def _numeric_rows(path: Path, rows: list[list[str]], first: int, width: int) -> NDArray[np.float64]:
    data = []
    for i in range(first, len(rows)):
        row = rows[i]
        if not row or not any(c.strip() for c in row):
            continue
        if len(row) > width:
            if any(c.strip() for c in row[width:]):
                raise MotiveCsvError(path, f"row has {len(row)} cells, the header has {width}", line=i + 1)
            row = row[:width]
        values = [math.nan] * width
        for j, text in enumerate(row):
            text = text.strip()
            if text:
                try:
                    values[j] = float(text)
                except ValueError:
                    raise MotiveCsvError(path, f"cell {j + 1} is not a number: {text!r}", line=i + 1) from None
        data.append(values)
    if not data:
        raise MotiveCsvError(path, "no data rows after the 'Frame' row")
    return np.asarray(data, dtype=float)


def _group(columns: list[_Column]) -> dict[tuple[str, str, str], list[_Column]]:
    groups: dict[tuple[str, str, str], list[_Column]] = {}
    for c in columns:
        groups.setdefault((c.kind, c.name, c.asset_id), []).append(c)
    return groups


def _pick(path: Path, data: NDArray[np.float64], cols: list[_Column], prop: str, axes: str, what: str) -> NDArray:
    out = []
    for axis in axes:
        match = [c for c in cols if c.prop == prop and c.axis == axis]
        if len(match) != 1:
            raise MotiveCsvError(path, f"{what}: expected one '{prop} {axis}' column, found {len(match)}")
        out.append(data[:, match[0].index])
    return np.stack(out, axis=1)


def _tracks(
    path: Path, header: MotiveHeader, columns: list[_Column], data: NDArray[np.float64], scale: float
) -> tuple[dict[str, RigidBodyTrack], dict[str, MarkerTrack]]:
    bodies: dict[str, RigidBodyTrack] = {}
    markers: dict[str, MarkerTrack] = {}
    for (kind, name, asset_id), cols in _group(columns).items():
        what = f"{kind} {name!r}"
        errors = [c for c in cols if c.prop in _ERROR_PROPERTIES]
        if kind in _BODY_TYPES:
            position = _pick(path, data, cols, "Position", "XYZ", what) * scale
            if header.rotation_type == "Quaternion":
                quat = _pick(path, data, cols, "Rotation", "XYZW", what)
            else:
                quat = _euler_to_xyzw(_pick(path, data, cols, "Rotation", "XYZ", what), header.rotation_type)
            norm = np.linalg.norm(quat, axis=1, keepdims=True)
            with np.errstate(invalid="ignore", divide="ignore"):
                quat = quat / norm
            error = data[:, errors[0].index] * scale if errors else None
            bodies[_unique(bodies, name)] = RigidBodyTrack(name, asset_id, kind, position, quat, error)
        elif kind in _MARKER_TYPES:
            position = _pick(path, data, cols, "Position", "XYZ", what) * scale
            quality = [c for c in cols if c.prop == "Marker Quality"]
            q = data[:, quality[0].index] if quality else None
            markers[_unique(markers, name)] = MarkerTrack(name, asset_id, kind, position, q)
    return bodies, markers


def _unique(existing: dict, name: str) -> str:
    if name not in existing:
        return name
    k = 2
    while f"{name}#{k}" in existing:
        k += 1
    return f"{name}#{k}"


def _euler_to_xyzw(angles_deg: NDArray[np.float64], order: str) -> NDArray[np.float64]:
    """Intrinsic rotations about the axes in ``order`` (angles in the X, Y, Z columns) [deg] → quaternions."""
    from scipy.spatial.transform import Rotation

    finite = np.isfinite(angles_deg).all(axis=1)
    out = np.full((angles_deg.shape[0], 4), np.nan)
    if finite.any():
        by_axis = {"X": 0, "Y": 1, "Z": 2}
        ordered = angles_deg[finite][:, [by_axis[a] for a in order]]
        out[finite] = Rotation.from_euler(order.upper(), ordered, degrees=True).as_quat()
    return out

"""Strict JSON: every report this package prints or sends is valid JSON, with null where a number is not finite."""
from __future__ import annotations

import json
import math
from typing import Any

__all__ = ["dumps", "finite_or_none"]


def finite_or_none(value: Any) -> Any:
    """``value`` with every non-finite float (NaN, ±inf) replaced by None, through dicts, lists and tuples; numpy
    scalars and arrays become Python numbers and lists."""
    if hasattr(value, "tolist") and not isinstance(value, (str, bytes)):
        value = value.tolist()
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite_or_none(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite_or_none(v) for v in value]
    return value


def dumps(value: Any, **kwargs: Any) -> str:
    """``json.dumps`` of :func:`finite_or_none` (``value``), refusing anything that would not be strict JSON."""
    return json.dumps(finite_or_none(value), allow_nan=False, **kwargs)

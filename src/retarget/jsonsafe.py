"""Strict JSON: every report this package prints or sends is valid JSON, with null where a number is not finite."""
from __future__ import annotations

import json
import math
from typing import ForwardRef, TypeAlias

__all__ = ["JSONObject", "JSONValue", "dumps", "finite_or_none"]

# The recursion names this module, so that typing.get_type_hints resolves the aliases wherever they annotate.
_VALUE = ForwardRef("JSONValue", module=__name__)

#: A JSON value as ``json.loads`` returns it.
JSONValue: TypeAlias = str | int | float | bool | None | list[_VALUE] | dict[str, _VALUE]

#: A JSON object as ``json.loads`` returns it (a report read back, a message's ``*_json`` field).
JSONObject: TypeAlias = dict[str, JSONValue]


def finite_or_none(value: object) -> JSONValue:
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
    return value  # str, int, bool or None (anything else json.dumps refuses)


def dumps(value: object, **kwargs: object) -> str:
    """``json.dumps`` of :func:`finite_or_none` (``value``), refusing anything that would not be strict JSON."""
    return json.dumps(finite_or_none(value), allow_nan=False, **kwargs)

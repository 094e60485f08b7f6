"""Writing keys into a ROS 2 params file without losing its comments and layout.

The params files (``config/<robot>.params.yaml``) are written by people and carry comments that explain each
setting; a YAML round trip through PyYAML would drop them (ruamel.yaml, which keeps them, is not a dependency).
:func:`set_ros_parameters` edits the text instead: a key of the ``/**: ros__parameters`` block is replaced in
place (its line and any more-indented continuation lines, e.g. a flow list spread over lines; a comment at the
end of its first or last line is kept), a new key goes after a given one (or at the end of the block). The result
is parsed again and must hold exactly the old parameters with the new values, or nothing is written; the file is
replaced atomically (:func:`retarget.atomic.atomic_path`: a temporary file beside it, then renamed), keeping its
permissions.

Values are written in flow style: floats always with a decimal point (rcl refuses a list mixing ``0`` and
``0.5``), integers as integers, strings quoted when YAML would read them otherwise.
"""
from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Union

import yaml

from retarget.atomic import atomic_path
from retarget.errors import InputError

__all__ = ["ParamValue", "format_value", "set_ros_parameters"]

#: A ROS 2 parameter value as written here: a bool, int, float or string, or a list (or tuple) of one of them.
ParamValue = Union[bool, int, float, str, "list[bool]", "list[int]", "list[float]", "list[str]", "tuple[float, ...]"]


def format_value(value: ParamValue, digits: int = 6) -> str:
    """A parameter value as YAML flow text: ``[0.3, -0.25]``, ``[1, -1]``, ``0.0``, ``true``, ``'a b'``.

    Args:
        value: bool, int, float, str or a list of one of them.
        digits: decimals kept of a float (trailing zeros dropped, one kept).

    Raises:
        InputError: a value of another type, a non-finite float, or a list mixing types.
    """
    if isinstance(value, (list, tuple)):
        kinds = {type(v) for v in value}
        if len(kinds) > 1:
            raise InputError(f"a parameter list must hold one type, got {sorted(k.__name__ for k in kinds)}")
        return "[" + ", ".join(format_value(v, digits) for v in value) + "]"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise InputError(f"a parameter cannot be {value}")
        text = f"{value:.{digits}f}".rstrip("0")
        text = text + "0" if text.endswith(".") else text
        return "0.0" if text in ("-0.0", "0.0") else text
    if isinstance(value, str):
        dumped = yaml.safe_dump(value, default_flow_style=True, width=1 << 20).strip()
        return dumped.removesuffix("\n...").removesuffix("...").strip()
    raise InputError(f"cannot write a parameter of type {type(value).__name__}")


def set_ros_parameters(path: str | Path, values: Mapping[str, ParamValue], *, after: str | None = None,
                       comments: Mapping[str, str] | None = None, write: bool = True) -> str:
    """Set ``values`` in the ``/**: ros__parameters`` block of the params file at ``path``.

    Args:
        path: the params file.
        values: key → value (:func:`format_value`'s types).
        after: put keys the file does not have yet after this key's value (default: at the end of the block).
        comments: key → a comment for its line (replacing the comment a key's line had).
        write: write the file (False: only return the new text).

    Returns:
        The new text.

    Raises:
        InputError: the file has no ``/**: ros__parameters`` block, or the edited text would not read back as the
            old parameters with the new values (nothing is written then).
    """
    path = Path(path)
    text = path.read_text()
    before = _parameters(text, path)
    lines = text.splitlines(keepends=True)
    block, indent = _block(lines, path)
    insert_at: int | None = None  # where the next new key goes: after the previous new one
    for key, value in values.items():
        comment = (comments or {}).get(key)
        span = _key_span(lines, block, indent, key)
        if span is not None:
            start, end = span
            # A comment on the key's line, else on the line that closes a value spread over lines.
            kept = comment if comment is not None else (_line_comment(lines[start]) or _line_comment(lines[end - 1]))
            lines[start:end] = [_line(indent, key, value, kept)]
            block = (block[0], block[1] - (end - start) + 1)
        else:
            if insert_at is None:
                anchor = _key_span(lines, block, indent, after) if after else None
                insert_at = anchor[1] if anchor is not None else _block_end(lines, block)
            lines.insert(insert_at, _line(indent, key, value, comment))
            insert_at += 1
            block = (block[0], block[1] + 1)
    new_text = "".join(lines)
    try:
        after_edit: dict[str, object] | None = _parameters(new_text, path)
    except InputError:  # the edit broke the YAML
        after_edit = None
    expected = {**before, **{k: _plain(v) for k, v in values.items()}}
    if after_edit != expected:
        raise InputError(f"{path}: editing the text would change more than {sorted(values)}; nothing written "
                         "(set the keys by hand)")
    if write:
        _replace(path, new_text)
    return new_text


def _plain(value: ParamValue) -> object:
    """The value as YAML reads back what :func:`format_value` wrote."""
    return yaml.safe_load(format_value(value))


def _parameters(text: str, path: Path) -> dict[str, object]:
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise InputError(f"{path}: not YAML: {exc}") from exc
    params = data.get("/**", {}).get("ros__parameters") if isinstance(data, dict) else None
    if not isinstance(params, dict):
        raise InputError(f"{path}: no '/**: ros__parameters:' mapping (docs/robot-description.md)")
    return params


def _indent_of(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def _is_content(line: str) -> bool:
    stripped = line.strip()
    return bool(stripped) and not stripped.startswith("#")


def _block(lines: list[str], path: Path) -> tuple[tuple[int, int], int]:
    """The line range of the ``ros__parameters`` block's keys and their indentation."""
    top = next((k for k, line in enumerate(lines) if re.match(r"""^['"]?/\*\*['"]?\s*:""", line)), None)
    head = next((k for k in range(top + 1, len(lines)) if re.match(r"^\s+ros__parameters\s*:", lines[k])), None) \
        if top is not None else None
    if head is None:
        raise InputError(f"{path}: no '/**: ros__parameters:' block to edit")
    first = next((k for k in range(head + 1, len(lines)) if _is_content(lines[k])), None)
    if first is None or _indent_of(lines[first]) <= _indent_of(lines[head]):
        raise InputError(f"{path}: the ros__parameters block is empty")
    indent = _indent_of(lines[first])
    end = first
    for k in range(first, len(lines)):
        if _is_content(lines[k]) and _indent_of(lines[k]) < indent:
            break
        end = k + 1
    return (first, end), indent


def _key_span(lines: list[str], block: tuple[int, int], indent: int, key: str | None) -> tuple[int, int] | None:
    """Lines ``[start, end)`` of ``key`` and its value (continuation lines are indented deeper)."""
    if key is None:
        return None
    pattern = re.compile(rf"^ {{{indent}}}{re.escape(key)}\s*:")
    for k in range(*block):
        if pattern.match(lines[k]):
            end = k + 1
            while end < block[1] and (not lines[end].strip() or _indent_of(lines[end]) > indent):
                if not lines[end].strip():  # a blank line ends the value unless deeper content follows
                    nxt = next((j for j in range(end, block[1]) if lines[j].strip()), None)
                    if nxt is None or _indent_of(lines[nxt]) <= indent or lines[nxt].strip().startswith("#"):
                        break
                end += 1
            return k, end
    return None


def _block_end(lines: list[str], block: tuple[int, int]) -> int:
    """Where a new key goes at the end of the block: after its last content line."""
    last = max(k for k in range(*block) if _is_content(lines[k]))
    return last + 1


def _line_comment(line: str) -> str | None:
    """The comment at the end of a key's line, if any (outside quotes)."""
    quote = None
    for k, ch in enumerate(line):
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and k > 0 and line[k - 1] in " \t":
            return line[k + 1:].strip()
    return None


def _line(indent: int, key: str, value: ParamValue, comment: str | None) -> str:
    text = f"{' ' * indent}{key}: {format_value(value)}"
    return text + (f"  # {comment}" if comment else "") + "\n"


def _replace(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` atomically (on disk before the rename), keeping its permissions."""
    mode = path.stat().st_mode & 0o7777
    with atomic_path(path) as tmp:
        with open(tmp, "w") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(tmp, mode)

"""numba typed lists of float64 arrays, built by cached kernels.

The compiled engine takes a robot's per-body tensors as typed lists (:class:`retarget.sim.reduced.compiled.Packed`):
a robot has any number of deformable bodies, each with its own shapes. Built from Python
(``List.empty_list`` then ``append``), such a list compiles numba's list methods for its item type in every process,
and numba caches none of them: about a second of compile each time a process packs a robot (a planner node, a
``retarget plan``, a twin; ``bench/results/model-load-drummer.json``). Here the lists are built inside cached kernels
instead, from one flat buffer with offsets and shapes: a process loads them from numba's disk cache in milliseconds.
The items are C-ordered copies of the arrays given, value for value.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numba import types
from numba.typed import List
from numpy.typing import ArrayLike, NDArray

from retarget.jit import njit

__all__ = ["typed_list"]

_ITEM_1 = types.Array(types.float64, 1, "C")
_ITEM_2 = types.Array(types.float64, 2, "C")
_ITEM_3 = types.Array(types.float64, 3, "C")
_ITEM_4 = types.Array(types.float64, 4, "C")


@njit(cache=True)
def _list_1d(flat: NDArray, offsets: NDArray, shapes: NDArray) -> List:
    out = List.empty_list(_ITEM_1)
    for k in range(len(offsets) - 1):
        out.append(flat[offsets[k] : offsets[k + 1]].copy())
    return out


@njit(cache=True)
def _list_2d(flat: NDArray, offsets: NDArray, shapes: NDArray) -> List:
    out = List.empty_list(_ITEM_2)
    for k in range(len(offsets) - 1):
        out.append(flat[offsets[k] : offsets[k + 1]].copy().reshape((shapes[k, 0], shapes[k, 1])))
    return out


@njit(cache=True)
def _list_3d(flat: NDArray, offsets: NDArray, shapes: NDArray) -> List:
    out = List.empty_list(_ITEM_3)
    for k in range(len(offsets) - 1):
        out.append(flat[offsets[k] : offsets[k + 1]].copy().reshape((shapes[k, 0], shapes[k, 1], shapes[k, 2])))
    return out


@njit(cache=True)
def _list_4d(flat: NDArray, offsets: NDArray, shapes: NDArray) -> List:
    out = List.empty_list(_ITEM_4)
    for k in range(len(offsets) - 1):
        shape = (shapes[k, 0], shapes[k, 1], shapes[k, 2], shapes[k, 3])
        out.append(flat[offsets[k] : offsets[k + 1]].copy().reshape(shape))
    return out


_BUILDERS = {1: _list_1d, 2: _list_2d, 3: _list_3d, 4: _list_4d}


def typed_list(arrays: Sequence[ArrayLike], ndim: int) -> List:
    """A numba typed list of C-ordered float64 copies of ``arrays``, each of ``ndim`` (1–4) dimensions; typed even
    when empty (a robot without flexible parts has no deformable bodies).

    Raises:
        ValueError: ``ndim`` outside 1–4, or an array of another number of dimensions.
    """
    if ndim not in _BUILDERS:
        raise ValueError(f"typed_list: ndim must be 1 to 4, not {ndim}")
    items = [np.asarray(a, dtype=np.float64) for a in arrays]
    for k, a in enumerate(items):
        if a.ndim != ndim:
            raise ValueError(f"typed_list: array {k} has {a.ndim} dimensions, not {ndim} (shape {a.shape})")
    shapes = np.array([a.shape for a in items], dtype=np.int64).reshape(len(items), ndim)
    offsets = np.concatenate([[0], np.cumsum([a.size for a in items])]).astype(np.int64)
    flat = np.concatenate([a.ravel() for a in items]) if items else np.zeros(0)
    return _BUILDERS[ndim](np.ascontiguousarray(flat), offsets, shapes)

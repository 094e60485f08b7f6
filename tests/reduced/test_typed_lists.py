"""The compiled engine's typed lists built by cached kernels (:mod:`retarget.sim.reduced.typed_lists`): C-ordered
float64 copies of the arrays, typed when empty, bad dimensions refused. (The engine's kernels read them in every
compiled-engine test: tests/reduced/test_compiled.py.)"""
from __future__ import annotations

import numba
import numpy as np
import pytest

from retarget.sim.reduced.typed_lists import typed_list


@pytest.mark.parametrize("ndim", [1, 2, 3, 4])
def test_items_are_c_ordered_float64_copies_of_the_arrays(ndim):
    rng = np.random.default_rng(ndim)
    arrays = [rng.standard_normal(tuple(rng.integers(1, 4, ndim))) for _ in range(3)]
    arrays[1] = np.asfortranarray(arrays[1])  # a Fortran-ordered input comes out C-ordered, equal
    arrays.append(np.zeros((0,) * ndim))  # an empty item keeps its place
    items = typed_list(arrays, ndim)
    assert len(items) == len(arrays)
    for got, want in zip(items, arrays):
        assert got.dtype == np.float64 and got.flags.c_contiguous and got.shape == want.shape
        assert np.array_equal(got, want)
        got[...] = 1.0  # a copy: the array given is untouched
    assert not any(np.all(a == 1.0) and a.size for a in arrays)
    assert items._list_type.item_type == numba.types.Array(numba.float64, ndim, "C")


def test_an_empty_list_is_typed():
    items = typed_list([], 3)
    assert len(items) == 0
    assert items._list_type.item_type == numba.types.Array(numba.float64, 3, "C")


def test_integer_arrays_become_float64():
    items = typed_list([np.arange(4)], 1)
    assert items[0].dtype == np.float64 and list(items[0]) == [0.0, 1.0, 2.0, 3.0]


def test_dimensions_other_than_declared_are_refused_naming_the_array():
    with pytest.raises(ValueError, match="array 1 has 1 dimensions, not 2"):
        typed_list([np.zeros((2, 2)), np.zeros(3)], 2)
    with pytest.raises(ValueError, match="ndim must be 1 to 4, not 5"):
        typed_list([], 5)

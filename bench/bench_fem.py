"""Benchmark of the FEM layer: internal forces + tangent stiffness assembly, numpy vs numba backends.

Prints one JSON object (the last line) with thread settings, mesh sizes and best-of-N wall times [s].
Run: ``.venv/bin/python bench/bench_fem.py [--repeat 5]``.
Single-threaded on purpose: the machine has 2 shared cores.
"""

from __future__ import annotations

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402

import numpy as np  # noqa: E402

from retarget.fem import ElasticBody, get_material, rod_mesh  # noqa: E402

#: (label, length [m], diameter [m], axial layers): about 5k and 30k DOF with 8 nodes around.
CASES = (("5k", 0.7, 0.005, 33), ("30k", 0.7, 0.005, 200))


def best_time(fn: Callable[[], object], repeat: int) -> float:
    """Best wall time of ``repeat`` calls [s] (after one warm-up call)."""
    fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    material = get_material("spring_steel")
    rng = np.random.default_rng(0)
    results = []
    for label, length, diameter, n_axial in CASES:
        mesh = rod_mesh(length, diameter, n_axial=n_axial)
        u = 1e-6 * rng.standard_normal(mesh.n_dofs)
        row: dict[str, object] = {"case": label, "n_dofs": mesh.n_dofs, "n_tets": mesh.n_tets}
        for backend in ("numpy", "numba"):
            t0 = time.perf_counter()
            body = ElasticBody(mesh, material, backend=backend)
            row["setup_s"] = round(time.perf_counter() - t0, 4)
            row["nnz"] = body.pattern.nnz
            row[f"{backend}_forces_s"] = round(
                best_time(lambda b=body, x=u: b.internal_forces(x), args.repeat), 5
            )
            row[f"{backend}_forces_stiffness_s"] = round(
                best_time(lambda b=body, x=u: b.internal_forces_and_stiffness(x), args.repeat), 5
            )
        t0 = time.perf_counter()
        body.mass_matrix()
        row["mass_matrix_s"] = round(time.perf_counter() - t0, 4)
        row["speedup_numba_forces_stiffness"] = round(
            row["numpy_forces_stiffness_s"] / row["numba_forces_stiffness_s"],
            2,  # type: ignore[operator]
        )
        results.append(row)
    report = {
        "benchmark": "fem_forces_stiffness",
        "threads": {
            v: os.environ.get(v) for v in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "NUMBA_NUM_THREADS")
        },
        "cpu_count": os.cpu_count(),
        "load_average_1min": os.getloadavg()[0],
        "python": platform.python_version(),
        "numpy": np.__version__,
        "material": material.name,
        "repeat": args.repeat,
        "results": results,
    }
    print(json.dumps(report))


if __name__ == "__main__":
    main()

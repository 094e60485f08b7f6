"""scripts/warm_numba.py's stamp: scripts/run_tests.sh skips the warm-up only while numba's cache is as the last
finished warm-up left it."""
from __future__ import annotations

import importlib.util
import os
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "warm_numba.py"


def _script():
    spec = importlib.util.spec_from_file_location("warm_numba", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _tree(root: Path) -> Path:
    (root / "sim" / "__pycache__").mkdir(parents=True)
    (root / "sim" / "kernels.py").write_text("x = 1\n")
    (root / "sim" / "__pycache__" / "kernels.f-10.py311.nbi").write_bytes(b"index")
    return root


def test_the_stamp_holds_until_a_source_or_a_cache_index_changes(tmp_path):
    warm = _script()
    src, stamp = _tree(tmp_path / "src"), tmp_path / "stamps" / "numba-warm"
    assert not warm.check(stamp, src)  # no warm-up finished yet
    warm.record(stamp, src)
    assert warm.check(stamp, src)
    (src / "sim" / "__pycache__" / "other.g-3.py311.nbi").write_bytes(b"index")  # a test compiled another kernel
    assert warm.check(stamp, src)
    source = src / "sim" / "kernels.py"
    st = source.stat()
    os.utime(source, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))  # edited: numba's index keys on the time
    assert not warm.check(stamp, src)
    warm.record(stamp, src)
    (src / "sim" / "__pycache__" / "kernels.f-10.py311.nbi").unlink()  # the cache deleted
    assert not warm.check(stamp, src)


def test_a_stamp_with_no_cache_index_does_not_count(tmp_path):
    warm = _script()
    src = tmp_path / "src"
    (src / "a").mkdir(parents=True)
    (src / "a" / "m.py").write_text("")
    warm.record(tmp_path / "stamp", src)
    assert not warm.check(tmp_path / "stamp", src)

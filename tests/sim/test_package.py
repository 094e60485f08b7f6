"""``retarget.sim``'s curated, lazily imported namespace."""
import subprocess
import sys

import pytest


@pytest.mark.integration
def test_every_public_name_resolves_and_simulate_stays_the_function():
    code = (
        "import sys, types\n"
        "import retarget.sim as s\n"
        "assert 'numba' not in sys.modules and 'scipy.sparse' not in sys.modules, 'eager heavy import'\n"
        "import retarget.sim.simulate\n"
        "assert not isinstance(s.simulate, types.ModuleType)\n"
        "for n in s.__all__:\n"
        "    getattr(s, n)\n"
        "from retarget.sim import simulate, SplineMotors\n"
        "from retarget.sim.simulate import simulate as f\n"
        "assert f is simulate and set(s.__all__) <= set(dir(s))\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_unknown_attribute_raises_attribute_error():
    import pytest

    import retarget.sim as s

    with pytest.raises(AttributeError):
        s.no_such_name  # noqa: B018

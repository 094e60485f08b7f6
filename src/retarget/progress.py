"""Progress bars on stderr for the command-line tools, the one home of their tqdm closures.

Long computations report progress through plain callbacks and know nothing of tqdm:

- ``(done, total)`` (a simulation's steps, a stage of the planner): :func:`progress_bar` makes one;
- ``(stage, done, total)`` (several stages, one bar each): :func:`stage_bars`;
- ``()`` once per unit of work (a fit's simulations): :func:`counting_bar` returns the bar, ``bar.update(1)``.

The bars go to stderr so that a command's stdout (its ``--json`` line) stays machine-readable.
"""
from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tqdm import tqdm

__all__ = ["counting_bar", "progress_bar", "stage_bars"]

#: Redraw a bar at most every this many units of work (a redraw per simulation step would slow short steps).
_REFRESH_EVERY = 50


def progress_bar(desc: str, unit: str = "step") -> Callable[[int, int], None]:
    """A ``progress(done, total)`` callback that draws a tqdm bar on stderr.

    ``done`` is the absolute position (a compiled engine reports once per chunk, the full engine once per step);
    the bar opens on the first call, closes when ``done == total``, and a later call (or one with another
    ``total``) opens a fresh bar, so one callback serves successive runs.

    Args:
        desc: Label in front of the bar.
        unit: What one count is (``"step"``, ``"sim"``, ...).

    Returns:
        ``progress(done, total)`` with ``0 <= done <= total`` (counts).
    """
    from tqdm import tqdm

    state: dict[str, tqdm] = {}

    def update(done: int, total: int) -> None:
        bar = state.get("bar")
        if bar is None or bar.total != total:
            if bar is not None:
                bar.close()
            bar = state["bar"] = tqdm(total=total, desc=desc, unit=unit, file=sys.stderr, leave=False)
        bar.n = done
        if done >= total or done % _REFRESH_EVERY == 0:
            bar.refresh()
        if done >= total:
            bar.close()
            state.pop("bar")

    return update


def stage_bars(unit: str = "step") -> Callable[[str, int, int], None]:
    """A ``progress(stage, done, total)`` callback: one :func:`progress_bar` per stage, labelled by the stage.

    Calls with ``total <= 0`` (a stage with nothing to count) draw nothing.
    """
    bars: dict[str, Callable[[int, int], None]] = {}

    def update(stage: str, done: int, total: int) -> None:
        if total <= 0:
            return
        if stage not in bars:
            bars[stage] = progress_bar(stage, unit)
        bars[stage](done, total)

    return update


def counting_bar(desc: str, unit: str, total: int | None = None) -> tqdm:
    """A tqdm bar on stderr counting units of work one ``bar.update(1)`` at a time; close it with ``bar.close()``.

    Args:
        desc: Label in front of the bar.
        unit: What one count is.
        total: Number of counts expected, None when unknown (the bar then shows a rate only).
    """
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit=unit, file=sys.stderr, leave=False)

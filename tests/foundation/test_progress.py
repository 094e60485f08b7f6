"""The progress helpers: callbacks draw tqdm bars on stderr, never on stdout, and survive successive runs."""
from __future__ import annotations

import pytest

from retarget.progress import counting_bar, progress_bar, stage_bars


def test_progress_bar_follows_the_absolute_position_and_reopens_for_a_new_run(capsys: pytest.CaptureFixture) -> None:
    update = progress_bar("simulate")
    for k in (1, 2, 50, 100):
        update(k, 100)
    for k in range(1, 4):  # a second run through the same callback, with another total
        update(k, 3)
    out, err = capsys.readouterr()
    assert out == ""
    assert "simulate" in err and "100/100" in err and "3/3" in err


def test_stage_bars_label_each_stage_and_skip_empty_ones(capsys: pytest.CaptureFixture) -> None:
    update = stage_bars()
    update("training", 2, 2)
    update("empty", 0, 0)
    update("verify", 5, 5)
    out, err = capsys.readouterr()
    assert out == ""
    assert "training" in err and "verify" in err and "empty" not in err


def test_counting_bar_counts_units_on_stderr(capsys: pytest.CaptureFixture) -> None:
    bar = counting_bar("fit", "sim")
    for _ in range(3):
        bar.update(1)
    assert bar.n == 3
    bar.close()
    out, err = capsys.readouterr()
    assert out == "" and "fit" in err and "sim" in err

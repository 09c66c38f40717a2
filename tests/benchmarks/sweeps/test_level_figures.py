"""The level figures' names, read off the level row's declaration, against the columns that
store them: a figure added to the row without its column (or a column renamed) fails here."""

from __future__ import annotations

import pytest
from django.db import models

from benchmarks.sweeps.level_figures import LEVEL_COLUMNS, LEVEL_FIGURES
from benchmarks.sweeps.models import SweepLevel
from benchmarks.sweeps.rows import LevelFigures, LevelRow


@pytest.mark.parametrize("name", LEVEL_FIGURES)
def test_each_headline_figure_is_a_float_column_of_the_level(name: str) -> None:
    assert isinstance(SweepLevel._meta.get_field(name), models.FloatField)


def test_the_audited_columns_are_the_figures_then_the_request_counts() -> None:
    assert (*LEVEL_FIGURES, "requests_ok", "requests_failed") == LEVEL_COLUMNS
    for name in LEVEL_COLUMNS[len(LEVEL_FIGURES) :]:
        assert isinstance(SweepLevel._meta.get_field(name), models.PositiveIntegerField)


def test_the_row_carries_every_figure_and_the_reason() -> None:
    assert tuple(LevelFigures.__annotations__) == (*LEVEL_COLUMNS, "reason")
    assert set(LevelFigures.__annotations__) <= set(LevelRow.__annotations__)

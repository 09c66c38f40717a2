from __future__ import annotations

import pytest

from benchlib.stats.tdist import t_cdf, t_ppf


@pytest.mark.parametrize(
    ("df", "expected"),
    [(1, 12.7062), (2, 4.3027), (3, 3.1824), (5, 2.5706), (10, 2.2281), (30, 2.0423)],
)
def test_t_quantile_matches_published_tables(df, expected):
    assert t_ppf(0.975, df) == pytest.approx(expected, abs=1e-4)


def test_t_quantile_is_symmetric_and_inverts_the_cdf():
    assert t_ppf(0.1, 4.5) == pytest.approx(-t_ppf(0.9, 4.5))
    assert t_cdf(t_ppf(0.8, 2.3), 2.3) == pytest.approx(0.8, abs=1e-9)


def test_t_quantile_tends_to_the_normal_for_large_df():
    assert t_ppf(0.975, float("inf")) == pytest.approx(1.959964, abs=1e-6)

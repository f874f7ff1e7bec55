"""A feed's own prior in ``pooled_rates``: what its publisher states, in place of the pool's (issue 45, item 3)."""

from __future__ import annotations

import math

import pytest

from proxy.core.rates import gamma_upper, pooled_rates

UPDATES = [0.0, 0.0, 4.0, 2.0]
EXPOSURE = [0.0, 50.0, 40.0, 100.0]


@pytest.mark.parametrize("z", [0.0, 1.0, 2.0])
def test_a_prior_replaces_the_pools_for_its_feed_only(z: float) -> None:
    plain = pooled_rates(UPDATES, EXPOSURE, 8.0, z)
    said = pooled_rates(UPDATES, EXPOSURE, 8.0, z, prior=[0.5, math.nan, 0.0, 0.02])
    assert said[1] == plain[1] and said[2] == plain[2]  # NaN and 0: no prior, the pool's
    # Feed 0 saw nothing: its rate is its stated 0.5's Gamma(8, 8/0.5) at the z quantile.
    assert said[0] == pytest.approx(gamma_upper(8.0, 8.0 / 0.5, z))
    assert said[3] == pytest.approx(gamma_upper(8.0 + 2.0, 8.0 / 0.02 + 100.0, z))


def test_a_prior_strength_of_its_own() -> None:
    one = pooled_rates(UPDATES, EXPOSURE, 8.0, 0.0, prior=[0.5] * 4, prior_strength=1.0)
    assert one[1] == pytest.approx(gamma_upper(1.0, 1.0 / 0.5 + 50.0, 0.0))
    # A weaker prior gives the feed's own record more say: 4 in 40 chronons is 0.1 against 0.5 stated.
    strong = pooled_rates(UPDATES, EXPOSURE, 8.0, 0.0, prior=[0.5] * 4)
    assert abs(one[2] - 0.1) < abs(strong[2] - 0.1)


def test_bad_priors_are_refused() -> None:
    with pytest.raises(ValueError, match="prior"):
        pooled_rates(UPDATES, EXPOSURE, 8.0, prior=[0.5])
    with pytest.raises(ValueError, match="prior_strength"):
        pooled_rates(UPDATES, EXPOSURE, 8.0, prior=[0.5] * 4, prior_strength=0.0)

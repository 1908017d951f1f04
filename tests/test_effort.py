"""The search's share of a round: population and generations shrink when search outweighs
measuring."""

import pytest

from ms_heron import HeronSearch
from ms_heron.errors import OptionError
from ms_heron.search.effort import MIN_SCALE, Effort


def test_a_round_that_searched_too_long_shrinks_population_and_generations():
    effort = Effort(0.25)
    effort.note_round(search_s=6.0, measure_s=8.0)  # ResNet-50's rounds: 43% search
    assert effort.scale == pytest.approx(0.25 / (6 / 14))
    assert effort.population(64, want=16) == 37 and effort.generations(3) == 2
    for _ in range(10):
        effort.note_round(search_s=6.0, measure_s=8.0)
    assert (
        effort.scale == MIN_SCALE
        and effort.population(64, want=16) == 32
        and effort.generations(3) == 1
    )


def test_cheap_rounds_grow_the_scale_back_and_no_further_than_given():
    effort = Effort(0.25)
    effort.scale = 0.5
    effort.note_round(search_s=1.0, measure_s=9.0)  # 10%: under half the share
    assert effort.scale == pytest.approx(0.625)
    effort.note_round(search_s=2.0, measure_s=8.0)  # 20%: within the share, held
    assert effort.scale == pytest.approx(0.625)
    for _ in range(10):
        effort.note_round(search_s=0.5, measure_s=9.5)
    assert (
        effort.scale == 1.0 and effort.population(64, want=16) == 64 and effort.generations(3) == 3
    )


def test_clones_share_the_effort_and_the_share_is_checked():
    search = HeronSearch(search_share=0.3)
    assert search._inst.clone()._inst.effort is search._inst.effort  # pylint: disable=protected-access
    with pytest.raises(
        OptionError, match=r"HeronSearch\(search_share=1.5\): give a share between 0 and 1"
    ):
        HeronSearch(search_share=1.5)

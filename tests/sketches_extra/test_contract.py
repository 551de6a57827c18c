"""The extra library's families walk the product's sketch contract
(``tests/sketches/test_contract.py``): the same tests, this module's ``family`` fixture."""

from __future__ import annotations

import pytest

from sketches_extra.deterministic_wave import DeterministicWave
from sketches_extra.dyadic import DyadicECM
from sketches_extra.exponential_histogram import ExponentialHistogram
from tests.sketches.test_contract import (  # noqa: F401  (collected here, with this family)
    test_every_structure_obeys_the_base,
    test_fresh_sketches_are_empty_and_fed_ones_are_not,
    test_merge_refusals_share_one_check_and_one_set_of_messages,
    test_merge_refuses_itself_with_the_fixed_message,
    test_merging_an_empty_sketch_changes_nothing,
    test_a_payload_cut_short_is_refused_whole_even_with_a_matching_header,
    test_round_trip_copy_and_repr,
    test_truncated_and_foreign_blobs_are_refused,
)

FAMILIES = {
    "exponential-histogram": (lambda: ExponentialHistogram(0.1, 100), lambda: [
        ExponentialHistogram(0.2, 100), ExponentialHistogram(0.1, 101)]),
    "deterministic-wave": (lambda: DeterministicWave(0.1, 100, 1000), lambda: [
        DeterministicWave(0.2, 100, 1000), DeterministicWave(0.1, 99, 1000), DeterministicWave(0.1, 100, 1001)]),
    "dyadic-ecm": (lambda: DyadicECM(0.2, 0.2, 100, levels=6), lambda: [
        DyadicECM(0.2, 0.2, 100, levels=7), DyadicECM(0.2, 0.2, 100, levels=6, seed=1), DyadicECM(0.2, 0.2, 101, levels=6)]),
}


@pytest.fixture(params=sorted(FAMILIES), ids=sorted(FAMILIES))
def family(request):
    return (request.param, *FAMILIES[request.param])

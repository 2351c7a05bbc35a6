"""The record index's merge rule (eoctl.incremental.merge_plan): an index stays a few segments, and
merging rewrites each record a logarithmic number of times, not once per run."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from eoctl.incremental import MAX_SEGMENTS, Segment, merge_plan


def _runs(first: int, added: list[int]) -> tuple[list[Segment], int]:
    """The segments after a first run of `first` records and one run per entry of `added`, as
    audit does it (a run that read nothing adds no segment); and how many records merges wrote."""
    segments = [Segment("first", first)]
    written = 0
    for i, k in enumerate(added):
        if k:
            segments.append(Segment(f"run-{i}", k))
        n = merge_plan(segments)
        if n:
            size = sum(s.records for s in segments[-n:])
            written += size
            segments = segments[:-n] + [Segment(f"merged-{i}", size)]
    return segments, written


@pytest.mark.unit
@given(first=st.integers(0, 10**7), added=st.lists(st.integers(0, 10**5), max_size=200))
def test_merging_keeps_every_record_and_few_segments(first: int, added: list[int]) -> None:
    segments, written = _runs(first, added)
    total = first + sum(added)
    assert sum(s.records for s in segments) == total
    assert len(segments) <= MAX_SEGMENTS
    # a record is rewritten once with its own run's segment, then only into a segment at least
    # twice the size of the one it was in
    assert written <= total * (math.log2(max(2, total)) + 2)


@pytest.mark.unit
@pytest.mark.parametrize("runs", [10, 100, 1000])
def test_equal_runs_rewrite_each_record_a_logarithmic_number_of_times(runs: int) -> None:
    k = 10_000
    segments, written = _runs(1_000_000, [k] * runs)
    assert written / (k * runs) <= math.log2(runs) + 1
    assert len(segments) <= math.log2(runs) + 2


@pytest.mark.unit
def test_a_small_run_after_a_large_index_merges_nothing() -> None:
    assert merge_plan([Segment("first", 1_000_000), Segment("new", 10)]) == 0
    assert merge_plan([Segment("first", 1_000_000), Segment("a", 10), Segment("b", 10)]) == 2
    assert merge_plan([Segment("first", 15), Segment("a", 10), Segment("b", 10)]) == 3

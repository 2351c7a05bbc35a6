"""What a continuing run knows of its index without reading it (eoctl.incremental): how many index
rows it takes (whole_index_count), and below which offset none is in flight (in_flight_floor)."""

from __future__ import annotations

from eoctl.incremental import PartitionPlan, RecordIndex, Segment, in_flight_floor, whole_index_count


def _index(lows: dict | None = None, inputs: tuple[str, ...] = ("billing",)) -> RecordIndex:
    """An index of 2 + 3 records of billing's orders[0] and orders[1], read to offsets 100 and 50."""
    return RecordIndex("run", (Segment("a", 2), Segment("b", 3)), dict.fromkeys(inputs, "fp"),
                       {"billing": {"orders": {0: 100, 1: 50}}}, lows=lows)


def _plans(start0: int = 100, low0: int = -1) -> dict[str, list[PartitionPlan]]:
    return {"billing": [PartitionPlan("orders", 0, start0, low0), PartitionPlan("orders", 1, 50)]}


def test_a_run_that_takes_every_index_row_counts_them_from_the_segments() -> None:
    assert whole_index_count(_index(), _plans()) == 5
    # a log start at or below the lowest indexed offset takes nothing away
    assert whole_index_count(_index(lows={"billing": {"orders": {0: 7, 1: 0}}}), _plans(low0=7)) == 5


def test_index_rows_that_may_not_count_are_counted_by_reading_them() -> None:
    # retention took rows: the log start is above the lowest offset the index holds (or unknown)
    assert whole_index_count(_index(lows={"billing": {"orders": {0: 7, 1: 0}}}), _plans(low0=8)) is None
    assert whole_index_count(_index(), _plans(low0=8)) is None
    # a partition the run does not plan, or reads from below the indexed end
    assert whole_index_count(_index(), {"billing": [PartitionPlan("orders", 0, 100)]}) is None
    assert whole_index_count(_index(), _plans(start0=90)) is None
    # the index holds an endpoint this run does not audit
    assert whole_index_count(_index(inputs=("billing", "shipping")), _plans()) is None


def test_no_index_row_below_the_lowest_committed_offset_is_in_flight() -> None:
    plans = _plans()
    assert in_flight_floor(plans, {"billing": {"orders": {0: 90, 1: 40}}}) == 40
    # a partition without a committed offset has every row in flight
    assert in_flight_floor(plans, {"billing": {"orders": {0: 90}}}) is None
    assert in_flight_floor({}, {}) is None

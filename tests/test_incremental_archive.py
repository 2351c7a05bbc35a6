"""Which rows of a topic archive a continuing run reads (eoctl.incremental.archive_branches): those
at or past their partition's start and every row of partitions and topics the index does not know,
each in exactly one of the disjoint parts the DuckDB engine reads as queries of their own."""

from __future__ import annotations

import duckdb
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from eoctl.incremental import PartitionPlan, archive_branches, archive_condition

_TOPICS = ("orders", "payments", "refunds")

_plans = st.dictionaries(
    st.tuples(st.sampled_from(_TOPICS[:2]), st.integers(0, 5)), st.integers(0, 12), min_size=1, max_size=8,
).map(lambda starts: [PartitionPlan(t, p, s) for (t, p), s in sorted(starts.items())])


def _quote(column: str) -> str:
    return f'"{column}"'


@pytest.mark.unit
@settings(max_examples=60, deadline=None)
@given(plans=_plans)
def test_each_row_to_read_is_in_exactly_one_part(plans: list[PartitionPlan]) -> None:
    con = duckdb.connect()
    con.execute("CREATE TABLE archive AS SELECT t AS topic, CAST(p AS INTEGER) AS \"partition\", "
                f"CAST(o AS BIGINT) AS \"offset\" FROM (SELECT unnest({list(_TOPICS)}) AS t), "
                "range(7) AS ps(p), range(15) AS os(o)")
    hits = " + ".join(f"CAST(coalesce({b}, false) AS INTEGER)" for b in archive_branches(plans, _quote))
    whole = f"coalesce({archive_condition(plans, _quote)}, false)"
    starts = {(p.topic, p.partition): p.start for p in plans}
    for topic, partition, offset, count, in_whole in con.execute(
            f'SELECT topic, "partition", "offset", {hits}, {whole} FROM archive').fetchall():
        start = starts.get((topic, partition))
        wanted = start is None or offset >= start
        assert count == int(wanted), (topic, partition, offset, count)
        assert in_whole == wanted

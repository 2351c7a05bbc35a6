"""The line under a finding's or a class's top rows says how many more there are and where to see
them: only where they are (the JSON lists more than the text, --output writes them all)."""

from __future__ import annotations

import pytest
from rich.console import Console

from eoctl.ops.reconcile import ClassEvidence, ReconcileReport
from eoctl.report.ops import render_reconcile
from eoctl.report.render import TOP_EVIDENCE, more_rows

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(("count", "listed", "file", "expected"), [
    (3, 3, None, None),  # every row shown
    (TOP_EVIDENCE, TOP_EVIDENCE, None, None),
    (9, 2, None, "... and 7 more; --output FILE writes them all"),  # --evidence-rows 2: JSON has no more
    (9, 9, None, f"... and {9 - TOP_EVIDENCE} more; --format json lists {9 - TOP_EVIDENCE} of them"),
    (500, 100, None, f"... and {500 - TOP_EVIDENCE} more; --format json lists {100 - TOP_EVIDENCE} of them, "
                     "--output FILE writes them all"),
    (500, 100, "r-evidence/x.parquet", f"... and {500 - TOP_EVIDENCE} more; all rows in r-evidence/x.parquet"),
])
def test_the_line_under_the_top_rows_says_where_the_rest_is(count, listed, file, expected) -> None:
    assert more_rows(count, listed, file) == expected


def test_reconcile_text_says_where_a_class_s_other_rows_are() -> None:
    rows = [{"token_id": f"t{i}", "message_id": f"m{i}"} for i in range(2)]
    report = ReconcileReport(run={"id": "r1", "grace_seconds": 0},
                             counts={"billing": {"garbage": 3}},
                             evidence=[ClassEvidence("billing", "garbage", 3, rows)])
    console = Console(record=True, width=200)
    render_reconcile(report, console)
    text = console.export_text()
    assert "token_id=t1" in text
    assert "... and 1 more; --output FILE writes them all" in text and "--format json" not in text

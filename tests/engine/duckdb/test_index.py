"""`audit --since-last` on the DuckDB engine (eoctl.engine.duckdb.index): the run reads from the
source only what the last recorded run did not see, takes the rest from its record index, and
reports what a full audit reports."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest

from eoctl import incremental
from eoctl.audit import select_codes
from tests.helpers.audits import audit_duckdb
from eoctl.config.model import Config
from eoctl.options import AuditOptions
from eoctl.findings import AuditReport
from tests.helpers.chaos import append_orders, recorded_copy, settled, state_names
from tests.helpers.findings import canonical, identities

CODES = select_codes(None, None)


def _options(**kw) -> AuditOptions:
    options = settled()
    for k, v in kw.items():
        setattr(options, k, v)
    return options


def recorded(config: Config, **kw) -> AuditReport:
    report = audit_duckdb(config, _options(keep_index=True, **kw), CODES)
    incremental.record(None, config, report)
    return report


def full(config: Config, like: AuditReport) -> AuditReport:
    """A full audit at the time of `like` (ages in evidence then compare equal)."""
    return audit_duckdb(config, _options(now=dt.datetime.fromisoformat(like.run["started_at"])), CODES)


@pytest.mark.integration
def test_since_last_on_duckdb_reports_what_a_full_audit_reports(tmp_path: Path) -> None:
    chaos = recorded_copy(tmp_path)
    first = recorded(chaos.config)
    assert set(first.run["scan"].pop("states")) == state_names(chaos.config)
    assert first.run["scan"] == {"mode": "full", "new_records": first.scanned["records"], "indexed_records": 0}
    root = Path(incremental.records_root(chaos.config))
    assert [s.records for s in first.index.segments] == [first.scanned["records"]]
    assert not list(root.glob("partial-*"))

    appended = append_orders(chaos.config_path.parent, "part-1.parquet")
    incr = recorded(chaos.config, since_last=True)
    whole = full(chaos.config, incr)
    assert set(incr.run["scan"].pop("states")) == state_names(chaos.config)
    assert incr.run["scan"].pop("sinks") == {"shipping/shipments": "new rows and the rows of the groups they or "
                                                                   "the states name"}
    assert incr.run["scan"] == {"mode": "incremental", "base_run": first.run["id"], "new_records": appended,
                                "indexed_records": first.scanned["records"],
                                "continued": sorted(state_names(chaos.config)), "index_read": "narrow"}
    assert incr.scanned == whole.scanned
    assert canonical(incr) == canonical(whole)
    # the boundary cases are there: each pairs an appended record with one the index holds
    for code in ("EO101", "EO102", "EO103"):
        assert canonical(whole)[(code, "billing", "orders")] != canonical(first).get((code, "billing", "orders"))

    # Once the consumer commits the appended records, they come from the index, now processed.
    offsets = chaos.config_path.parent / "topics" / "orders" / "_committed_offsets.json"
    offsets.write_text(json.dumps({"orders": {"0": 22, "1": 26}}))
    committed = recorded(chaos.config, since_last=True)
    assert committed.run["scan"]["new_records"] == 0 and committed.run["scan"]["base_run"] == incr.run["id"]
    assert canonical(committed) == canonical(full(chaos.config, committed))
    assert identities(committed) != identities(whole)  # the appended records are processed now

    # A second append as large as the first: the two newest segments are merged into one.
    append_orders(chaos.config_path.parent, "part-2.parquet")
    merged = recorded(chaos.config, since_last=True)
    assert merged.run["scan"]["new_records"] == appended
    assert canonical(merged) == canonical(full(chaos.config, merged))
    assert [(Path(s.path).parent.name, Path(s.path).name, s.records) for s in merged.index.segments] == [
        (first.run["id"], "records", first.scanned["records"]), (merged.run["id"], "merged", 2 * appended)]
    assert not (root / merged.run["id"] / "records").exists()
    # every folder the two newest indexes read stays (their segments, and each run's own states);
    # the others are pruned
    assert sorted(p.name for p in root.iterdir()) == sorted(
        {first.run["id"], incr.run["id"], committed.run["id"], merged.run["id"]})


@pytest.mark.integration
def test_a_failed_duckdb_run_leaves_no_partial_index(tmp_path: Path) -> None:
    chaos = recorded_copy(tmp_path)
    recorded(chaos.config)
    root = Path(incremental.records_root(chaos.config))
    before = sorted(p.name for p in root.iterdir())
    (chaos.config_path.parent / "topics" / "orders" / "part-9.parquet").write_bytes(b"PAR1 cut short")
    with pytest.raises(Exception, match="part-9.parquet"):  # main() turns it into one line (tested elsewhere)
        recorded(chaos.config, since_last=True)
    assert sorted(p.name for p in root.iterdir()) == before


@pytest.mark.integration
def test_past_the_fetch_limit_the_probes_read_the_whole_index(tmp_path: Path, monkeypatch) -> None:
    """A mass redelivery of old messages: more indexed rows to fetch by number than REACH_FETCH_MAX
    (here: any), so the probes read every indexed row instead, and report the same."""
    from eoctl.engine.duckdb import index

    chaos = recorded_copy(tmp_path)
    recorded(chaos.config)
    append_orders(chaos.config_path.parent, "part-1.parquet")  # redelivers indexed messages
    monkeypatch.setattr(index, "REACH_FETCH_MAX", 0)
    incr = recorded(chaos.config, since_last=True)
    assert incr.run["scan"]["index_read"] == "whole"
    assert canonical(incr) == canonical(full(chaos.config, incr))


@pytest.mark.integration
def test_a_partition_without_a_committed_offset_reads_the_whole_index(tmp_path: Path) -> None:
    """A partition whose consumer has committed nothing: every indexed row of it is in flight, so
    no floor bounds the look-ups and the probes read every indexed row, and report the same."""
    chaos = recorded_copy(tmp_path)
    recorded(chaos.config)
    append_orders(chaos.config_path.parent, "part-1.parquet")
    offsets = chaos.config_path.parent / "topics" / "orders" / "_committed_offsets.json"
    offsets.write_text(json.dumps({"orders": {"0": 22}}))  # partition 1: no committed offset
    incr = recorded(chaos.config, since_last=True)
    assert incr.run["scan"]["mode"] == "incremental"
    assert incr.run["scan"]["index_read"] == "whole"
    assert canonical(incr) == canonical(full(chaos.config, incr))

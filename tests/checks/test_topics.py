"""EO104 sequence gaps: the bitmap decoding against a plain oracle (Hypothesis), and the
whole check on an archive whose gaps cross bucket boundaries, skip whole buckets and go negative."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eoctl.audit import run_audit, select_codes
from eoctl.checks.context import AuditOptions
from eoctl.checks.topics import _BUCKET_BITS, _buckets, _gaps
from eoctl.config import load_config
from tests.helpers.configs import write_config

BUCKET = 1 << _BUCKET_BITS


def missing_runs(present: set[int]) -> list[tuple[int, int]]:
    """The oracle: runs of numbers absent between min and max of `present`."""
    runs, ordered = [], sorted(present)
    for a, b in zip(ordered, ordered[1:]):
        if b > a + 1:
            runs.append((a + 1, b - 1))
    return runs


numbers = st.lists(st.tuples(st.integers(-3 * BUCKET, 4 * BUCKET), st.integers(1, 3000)), min_size=1, max_size=6).map(
    lambda runs: {start + k for start, length in runs for k in range(length)})


@pytest.mark.integration
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(by_producer=st.dictionaries(st.sampled_from("pqr"), numbers, min_size=1, max_size=3))
def test_bitmap_gaps_equal_the_missing_runs(spark, by_producer: dict[str, set[int]]) -> None:
    """Random runs of numbers, crossing bucket boundaries, skipping whole buckets, negative."""
    rows = [("e", "t", p, n) for p, ns in by_producer.items() for n in ns]
    df = spark.createDataFrame(rows, "endpoint string, topic string, producer string, seq long")
    found = sorted((r.producer, r.missing_from, r.missing_to) for r in _gaps(_buckets(df)).collect())
    assert found == sorted((p, a, b) for p, ns in by_producer.items() for a, b in missing_runs(ns))


def _record(offset: int, producer: str, seq: int) -> dict:
    headers = [("eo-message-id", f"m{offset}"), ("eo-token-id", f"t{offset}"), ("eo-producer", producer),
               ("eo-sequence", str(seq))]
    return {"topic": "orders", "partition": 0, "offset": offset, "timestamp": None, "key": None, "value": b"{}",
            "headers": [{"key": k, "value": v.encode()} for k, v in headers]}


@pytest.mark.integration
def test_gaps_across_buckets_whole_missing_buckets_and_negative_numbers(spark, tmp_path: Path) -> None:
    from eoctl.sources.records import record_schema

    sequences = {
        # a gap inside a bucket, one across the boundary at 32768, then whole buckets missing
        "a": {*range(0, 10), *range(12, BUCKET - 2), BUCKET + 2, 5 * BUCKET + 7},
        # negative numbers, and a duplicate (same number twice is not a gap)
        "b": {-BUCKET - 1, -5, -4, -1, 0, 1, 3},
        # no gap at all
        "c": set(range(BUCKET - 3, BUCKET + 3)),
    }
    rows = [(p, s) for p, seqs in sequences.items() for s in sorted(seqs)] + [("b", 3)]
    archive = tmp_path / "orders"
    spark.createDataFrame([_record(i, p, s) for i, (p, s) in enumerate(rows)], record_schema()).write.parquet(
        str(archive))
    (archive / "_committed_offsets.json").write_text(json.dumps({"orders": {"0": len(rows)}}))
    config = write_config(tmp_path, f"""
[endpoints.billing.input]
topics = ["orders"]
archive = "{archive}"
""")
    report = run_audit(spark, load_config(config), AuditOptions(), ["EO104"])
    found = sorted((e["producer"], e["missing_from"], e["missing_to"]) for f in report.findings for e in f.evidence)
    expected = sorted((p, a, b) for p, seqs in sequences.items() for a, b in missing_runs(seqs))
    assert found == expected
    assert expected  # the case is not vacuous: producers a and b have gaps


@pytest.mark.integration
def test_working_copy_goes_to_scratch_dir_and_is_removed_afterwards(spark, tmp_path: Path) -> None:
    from tests.helpers.servers import REPO

    config = load_config(REPO / "samples" / "chaos" / "eoctl.toml")
    scratch = tmp_path / "scratch"
    config = config.model_copy(update={"engine": config.engine.model_copy(update={"scratch_dir": str(scratch)})})
    during: list[list[str]] = []
    report = run_audit(spark, config, AuditOptions(), ["EO105"],
                       progress=lambda _m: during.append([p.name for p in scratch.glob("eoctl-audit-*")]))
    assert report.scanned["records"] > 0
    assert any(during[1:]), "the records were not written to the scratch folder"
    assert not list(scratch.glob("eoctl-audit-*")), "the working copy was left behind"


def _item_keys(report) -> dict[tuple[str, str, str], tuple[int, list[str]]]:
    from eoctl import history

    return {(f.code, f.endpoint, f.where): (f.count, sorted(history.item_key(f.code, row) for row in f.evidence))
            for f in report.findings}


@pytest.mark.integration
@pytest.mark.parametrize("engine", ["spark", "duckdb"])
def test_undecodable_archive_lines_are_a_finding_until_repaired(spark, tmp_path: Path, engine: str) -> None:
    """A JSON archive (as Spark writes one) with a line cut short, on either engine: every other
    finding is what the intact archive gives, the line is EO106 by file and line, `scanned` counts
    it, and --since-last names it until the file is repaired."""
    from eoctl import incremental
    from eoctl.audit import run_audit_duckdb
    from tests.helpers.chaos import recorded_copy, settled

    def audit(config, options, codes):
        if engine == "spark":
            return run_audit(spark, config, options, codes)
        return run_audit_duckdb(config, options, codes)

    chaos = recorded_copy(tmp_path)
    codes = select_codes(["EO1"], None)  # the checks of the records themselves
    intact = audit(chaos.config, settled(), codes)
    orders = chaos.config_path.parent / "topics" / "orders"
    spark.read.parquet(str(orders)).coalesce(1).write.json(str(tmp_path / "as-json"))
    for old in orders.glob("*.parquet"):
        old.unlink()
    part = orders / "part-0.json"
    lines = next((tmp_path / "as-json").glob("part-*.json")).read_text().splitlines()
    part.write_text("\n".join([*lines[:10], lines[10][:60], *lines[10:]]) + "\n")
    chaos.config_path.write_text(chaos.config_path.read_text().replace(
        'archive = "topics/orders"', 'archive = "topics/orders"\narchive_format = "json"'))
    config = load_config(chaos.config_path)

    def audited(**kw):
        options = settled()
        options.keep_index = True
        for k, v in kw.items():
            setattr(options, k, v)
        report = audit(config, options, codes)
        incremental.record(spark if engine == "spark" else None, config, report)
        return report

    for report in (audited(), audited(since_last=True)):
        (eo106,) = [f for f in report.findings if f.code == "EO106"]
        assert (eo106.endpoint, eo106.where, eo106.count) == ("billing", str(orders), 1)
        assert eo106.evidence == [{"file": str(part), "line": 11, "text": lines[10][:60],
                                   "problem": "not a record: malformed JSON or a field of the wrong type"}]
        others = {k: v for k, v in _item_keys(report).items() if k[0] != "EO106"}
        assert others == _item_keys(intact)
        assert report.scanned["records"] == intact.scanned["records"]
        assert report.scanned["undecodable"] == 1
    assert report.run["scan"]["mode"] == "incremental"

    part.write_text("\n".join(lines) + "\n")  # repaired
    repaired = audited(since_last=True)
    assert "EO106" not in {f.code for f in repaired.findings}
    assert repaired.scanned["undecodable"] == 0

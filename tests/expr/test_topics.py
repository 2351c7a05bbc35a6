"""EO104 sequence gaps (eoctl.expr.topics.missing_sequences): the expression against a plain oracle
(Hypothesis) with pending outbox entries holding some missing numbers, and the whole check on an
archive with long stretches missing and negative numbers, on both engines."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eoctl.audit import select_codes
from tests.helpers.audits import audit_duckdb, audit_spark
from eoctl.config import load_config
from eoctl.options import AuditOptions
from tests.helpers.configs import write_config

SPAN = 1 << 15


def missing_runs(present: set[int]) -> list[tuple[int, int]]:
    """The oracle: runs of numbers absent between min and max of `present`."""
    runs, ordered = [], sorted(present)
    for a, b in zip(ordered, ordered[1:]):
        if b > a + 1:
            runs.append((a + 1, b - 1))
    return runs


# runs of numbers: long ones far apart (long stretches missing, negative numbers), short ones close
# together (gaps short enough for pending entries to hold every number in them)
_run = st.one_of(st.tuples(st.integers(-3 * SPAN, 4 * SPAN), st.integers(1, 3000)),
                 st.tuples(st.integers(-40, 120), st.integers(1, 20)))
numbers = st.lists(_run, min_size=1, max_size=6).map(
    lambda runs: {start + k for start, length in runs for k in range(length)})


def _gaps_on_duckdb(config_path: Path, sequences: dict[str, set[int]], held: dict[str, set[int]]) -> list[tuple]:
    """EO104's expression on DuckDB over `records` of endpoint billing and an `outbox` whose
    pending entries hold the numbers of `held` (one outgoing message each)."""
    import duckdb
    import ibis
    import pyarrow as pa
    from ibis.backends.sql.datatypes import DuckDBType

    from eoctl.expr import Dialect, compile_sql
    from eoctl.expr.inputs import STORE_SCHEMAS, Scope
    from eoctl.expr.records import records_table
    from eoctl.expr.topics import missing_sequences, sequence_ranges

    records = [{"endpoint": "billing", "topic": "t", "partition": 0, "offset": i, "processed": True,
                "message_id": f"m{i}", "token_id": f"k{i}", "producer": p, "seq": n}
               for i, (p, n) in enumerate((p, n) for p, ns in sequences.items() for n in sorted(ns))]
    outbox = [{"ep": "billing", "incoming_message_id": f"in-{p}-{n}", "outgoing": json.dumps([{
        "message_id": f"out-{p}-{n}", "token_id": f"tok-{p}-{n}", "topic": "t", "key": None,
        "headers": {"eo-producer": p, "eo-sequence": str(n)}}])} for p, ns in held.items() for n in sorted(ns)]
    con = duckdb.connect()
    for name, schema, rows in (("records", records_table().schema(), records),
                               ("outbox", ibis.schema({"ep": "string", **STORE_SCHEMAS["outbox"]}), outbox)):
        columns = [f'"{c}"' for c in schema]
        types = [DuckDBType.to_string(t) for t in schema.values()]
        con.execute(f"CREATE TABLE {name} ({', '.join(f'{c} {t}' for c, t in zip(columns, types))})")
        if rows:
            given_rows = pa.Table.from_pylist(rows)  # noqa: F841 (read by the statement below)
            con.execute(f"INSERT INTO {name} BY NAME SELECT * FROM given_rows")
    scope = Scope(load_config(config_path), AuditOptions(), tables={("billing", "outbox")})
    con.execute("CREATE TABLE sequence_ranges AS " + compile_sql(sequence_ranges(records_table(), Dialect.duckdb),
                                                                  Dialect.duckdb))
    sql = compile_sql(missing_sequences(scope, records_table(), Dialect.duckdb), Dialect.duckdb)
    return sorted(con.execute(f"SELECT producer, missing_from, missing_to FROM ({sql})").fetchall())


@pytest.mark.unit
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(by_producer=st.dictionaries(st.sampled_from("pqr"), numbers, min_size=1, max_size=3), data=st.data())
def test_gaps_are_the_missing_runs_not_wholly_held_by_pending_entries(tmp_path: Path, by_producer, data) -> None:
    """Random runs of numbers (long stretches missing, negative numbers); some missing numbers
    are held by pending entries: a gap is reported unless every number in it is held."""
    config = write_config(tmp_path, """
        [endpoints.billing.input]
        topics = ["t"]
        archive = "/nowhere"
    """)
    held: dict[str, set[int]] = {}
    for p, ns in by_producer.items():
        for a, b in missing_runs(ns):
            choice = data.draw(st.sampled_from(["none", "all", "some"]), label=f"{p} {a}..{b}")
            if choice == "all" and b - a < 50:
                held.setdefault(p, set()).update(range(a, b + 1))
            elif choice == "some":
                held.setdefault(p, set()).add(a)
    expected = sorted((p, a, b) for p, ns in by_producer.items() for a, b in missing_runs(ns)
                      if not set(range(a, b + 1)) <= held.get(p, set()))
    assert _gaps_on_duckdb(config, by_producer, held) == expected


def _record(offset: int, producer: str, seq: int) -> dict:
    headers = [("eo-message-id", f"m{offset}"), ("eo-token-id", f"t{offset}"), ("eo-producer", producer),
               ("eo-sequence", str(seq))]
    return {"topic": "orders", "partition": 0, "offset": offset, "timestamp": None, "key": None, "value": b"{}",
            "headers": [{"key": k, "value": v.encode()} for k, v in headers]}


@pytest.mark.integration
@pytest.mark.parametrize("engine", ["spark", "duckdb"])
def test_gaps_in_long_sequences_long_missing_stretches_and_negative_numbers(spark, tmp_path: Path,
                                                                            engine: str) -> None:
    from eoctl.engine.spark.sources import record_schema

    sequences = {
        # a short gap, one past 32768, then long stretches missing
        "a": {*range(0, 10), *range(12, SPAN - 2), SPAN + 2, 5 * SPAN + 7},
        # negative numbers, and a duplicate (same number twice is not a gap)
        "b": {-SPAN - 1, -5, -4, -1, 0, 1, 3},
        # no gap at all
        "c": set(range(SPAN - 3, SPAN + 3)),
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
    if engine == "spark":
        report = audit_spark(spark, load_config(config), AuditOptions(), ["EO104"])
    else:
        report = audit_duckdb(load_config(config, overrides={"kind": "duckdb"}), AuditOptions(), ["EO104"])
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
    report = audit_spark(spark, config, AuditOptions(), ["EO105"],
                       progress=lambda _m: during.append([p.name for p in scratch.glob("eoctl-audit-*")]))
    assert report.scanned["records"] > 0
    assert any(during[1:]), "the records were not written to the scratch folder"
    assert not list(scratch.glob("eoctl-audit-*")), "the working copy was left behind"


def _item_keys(report) -> dict[tuple[str, str, str], tuple[int, list[str]]]:
    from eoctl import history

    return {(f.code, f.endpoint, f.where): (f.count, sorted(history.item_key(f.code, row) for row in f.evidence))
            for f in report.findings}


@pytest.mark.integration
@pytest.mark.parametrize("damage", ["cut short", "binary garbage"])
@pytest.mark.parametrize("engine", ["spark", "duckdb"])
def test_undecodable_archive_lines_are_a_finding_until_repaired(spark, tmp_path: Path, engine: str,
                                                                damage: str) -> None:
    """A JSON archive (as Spark writes one) with a line cut short, or a line of bytes that are not
    UTF-8 (DuckDB rejected the whole file), on either engine: every other finding is what the
    intact archive gives, the line is EO106 by file and line, `scanned` counts it, and
    --since-last names it until the file is repaired."""
    from eoctl import incremental
    from tests.helpers.audits import audit_duckdb
    from tests.helpers.chaos import recorded_copy, settled

    def audit(config, options, codes):
        if engine == "spark":
            return audit_spark(spark, config, options, codes)
        return audit_duckdb(config, options, codes)

    chaos = recorded_copy(tmp_path)
    codes = select_codes(["EO1"], None)  # the checks of the records themselves
    intact = audit(chaos.config, settled(), codes)
    orders = chaos.config_path.parent / "topics" / "orders"
    spark.read.parquet(str(orders)).coalesce(1).write.json(str(tmp_path / "as-json"))
    for old in orders.glob("*.parquet"):
        old.unlink()
    part = orders / "part-0.json"
    lines = next((tmp_path / "as-json").glob("part-*.json")).read_text().splitlines()
    garbage = "\ufffd\ufffd garbage \ufffd"  # as both engines read b"\xff\xfe garbage \x80"
    if damage == "cut short":
        part.write_text("\n".join([*lines[:10], lines[10][:60], *lines[10:]]) + "\n")
    else:
        part.write_bytes("\n".join(lines[:10]).encode() + b"\n\xff\xfe garbage \x80\n"
                         + "\n".join(lines[10:]).encode() + b"\n")
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
        assert eo106.evidence == [{"file": str(part), "line": 11,
                                   "text": lines[10][:60] if damage == "cut short" else garbage,
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


def _ranges_on_duckdb(con, name: str, numbers: set[int]) -> None:
    """Table `name`: the ranges of `numbers` (producer p of billing's topic t), as EO104 keeps them."""
    import pyarrow as pa
    from ibis.backends.sql.datatypes import DuckDBType

    from eoctl.expr import Dialect, compile_sql
    from eoctl.expr.records import records_table
    from eoctl.expr.topics import sequence_ranges

    schema = records_table().schema()
    rows = [{"endpoint": "billing", "topic": "t", "partition": 0, "offset": i, "message_id": f"m{i}",
             "token_id": f"k{i}", "producer": "p", "seq": n} for i, n in enumerate(sorted(numbers))]
    columns = ", ".join(f'"{c}" {DuckDBType.to_string(t)}' for c, t in schema.items())
    con.execute(f"CREATE OR REPLACE TABLE records ({columns})")
    if rows:
        given_rows = pa.Table.from_pylist(rows)  # noqa: F841 (read by the statement below)
        con.execute("INSERT INTO records BY NAME SELECT * FROM given_rows")
    con.execute(f"CREATE TABLE {name} AS " + compile_sql(sequence_ranges(records_table(), Dialect.duckdb),
                                                          Dialect.duckdb))


@pytest.mark.unit
@settings(max_examples=60, deadline=None)
@given(first=numbers, second=numbers)
def test_ranges_kept_and_joined_with_new_numbers_are_the_ranges_of_all_numbers(first, second) -> None:
    """What an incremental audit keeps of EO104 (eoctl.expr.incremental): the ranges of the numbers
    seen before, joined with the new numbers' ranges, are the ranges of all of them: the fewest,
    each a run of consecutive numbers."""
    import duckdb
    import ibis

    from eoctl.expr import Dialect, compile_sql
    from eoctl.expr.topics import RANGES_SCHEMA, coalesce_ranges

    con = duckdb.connect()
    _ranges_on_duckdb(con, "kept", first)
    _ranges_on_duckdb(con, "new", second)
    kept, new = (ibis.table(ibis.schema(RANGES_SCHEMA), name=n) for n in ("kept", "new"))
    joined = con.execute(f"SELECT lo, hi FROM ({compile_sql(coalesce_ranges(kept.union(new)), Dialect.duckdb)}) "
                         "ORDER BY lo").fetchall()
    every = sorted(first | second)
    expected, start = [], every[0]
    for a, b in zip(every, every[1:] + [None]):
        if b is None or b > a + 1:
            expected.append((start, a))
            start = b
    assert joined == expected

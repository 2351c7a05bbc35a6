"""`eoctl audit --since-last`: an audit that reads from the source only what the last recorded run
did not see, and takes the rest from that run's record index.

A recorded audit keeps its working copy of the records (the RECORD_COLUMNS Parquet every check
reads) as the run's *record index*, and the history row names it together with the end offset it
scanned per (endpoint, topic, partition). An incremental audit reads the source from
the indexed end on, takes the index rows below that, recomputes their
`committed`/`processed` from the current committed offsets, and unions both into its working copy.
The checks then see the same records a full audit would, so duplicate detection stays correct
across the boundary by construction.

What this assumes, and a full audit does not: a partition's records below the indexed end do not
change. True for Kafka (an append-only log; records below the log start offset are dropped from
the index as a full read would not see them either), and for topic archives that are appended to.
A compacted topic, or an archive whose old files are rewritten, needs a full audit.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from eoctl.config.model import Config, EndpointConfig, TopicInput
from eoctl.sources.kafka import EARLIEST, LATEST, OffsetRange

if TYPE_CHECKING:
    from pyspark.sql import Column, SparkSession

    from eoctl.checks.context import AuditOptions
    from eoctl.report.findings import AuditReport

#: Bumped whenever the derived columns of the working copy change: an index written by another
#: version would otherwise mix old and new derivations in one audit.
INDEX_VERSION = 1
NO_BASE = "no earlier run to continue from: full scan"
_PARTIAL = "partial-"
_KEEP = 2  # indexes kept: the newest, and the one before for an audit still reading it
_PARTIAL_MAX_AGE = dt.timedelta(hours=24)  # an older partial index is a killed audit's


@dataclass(frozen=True)
class RecordIndex:
    """A recorded run's record index: where it is, what inputs it covers, how far it read."""

    run_id: str
    path: str
    inputs: dict[str, str]  # endpoint -> fingerprint of its input
    ends: dict[str, dict[str, dict[int, int]]]  # endpoint -> topic -> partition -> max offset + 1

    def to_json(self) -> str:
        return json.dumps({"version": INDEX_VERSION, "path": self.path, "inputs": self.inputs, "ends": self.ends},
                          sort_keys=True)

    @classmethod
    def from_json(cls, run_id: str, text: str) -> RecordIndex | None:
        raw = json.loads(text)
        if raw.get("version") != INDEX_VERSION:
            return None
        ends = {ep: {t: {int(p): int(o) for p, o in parts.items()} for t, parts in topics.items()}
                for ep, topics in raw["ends"].items()}
        return cls(run_id, raw["path"], raw["inputs"], ends)


@dataclass(frozen=True)
class PartitionPlan:
    """Read the source from `start` on; keep the index rows with low <= offset < start."""

    topic: str
    partition: int
    start: int  # EARLIEST for a partition the index does not know
    low: int = -1  # the log start offset (Kafka); -1 keeps every index row below start


# ------------------------------------------------------------------------------- locations


def records_root(config: Config) -> str:
    """The folder of record indexes: `[history] records`, else beside the history file (with a
    store, the history path's default is still the configuration's folder)."""
    if config.history.records:
        return config.history.records.rstrip("/")
    return str(Path(config.history.path).with_suffix("")) + ".records"


def partial_path(config: Config, run_id: str) -> str:
    return f"{records_root(config)}/{_PARTIAL}{run_id}"


def indexable(config: Config, options: AuditOptions) -> bool:
    """Whether this audit's working copy can become a record index: it must hold every record
    (no --range/--since/--until), and be written where the driver can rename it (a local master,
    or `[history] records` set to a folder every executor reaches; never Spark Connect, whose
    client has no file system API)."""
    engine = config.engine
    if options.ranges or options.since or options.until or engine.remote:
        return False
    return bool(config.history.records) or engine.master.startswith("local")


def input_fingerprint(config: Config, ep: EndpointConfig) -> str:
    """What an index's rows depend on: the input (not its committed offsets, which are recomputed),
    the broker it is read from, the header names and the index format."""
    assert ep.input is not None
    source: TopicInput = ep.input
    what: dict[str, Any] = {
        "version": INDEX_VERSION,
        "input": source.model_dump(mode="json", exclude={"committed_offsets"}),
        "headers": config.protocol.headers.model_dump(mode="json"),
    }
    if source.kafka:
        what["bootstrap"] = config.kafka[source.kafka].bootstrap_servers
    return hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()[:16]


def fingerprints(config: Config, endpoints: dict[str, EndpointConfig]) -> dict[str, str]:
    return {name: input_fingerprint(config, ep) for name, ep in endpoints.items() if ep.input}


# ---------------------------------------------------------------------------------- base


def find_base(spark: SparkSession, config: Config, endpoints: dict[str, EndpointConfig]) -> RecordIndex | None:
    """The newest recorded run whose index covers every audited input unchanged, if its index is
    still there."""
    from eoctl.history import indexed_runs

    wanted = fingerprints(config, endpoints)
    for run_id, text in indexed_runs(config):
        index = RecordIndex.from_json(run_id, text)
        if index is None or any(index.inputs.get(n) != f for n, f in wanted.items()):
            continue
        if _exists(spark, index.path):
            return index
    return None


def kafka_plan(config: Config, source: TopicInput,
               ends: dict[str, dict[int, int]]) -> tuple[list[PartitionPlan] | None, str | None]:
    """Per partition of a live input: where to start reading and which index rows still count.
    None (with the reason) when a partition now ends below what the index read: the topic was
    recreated or truncated, and the index describes records that are gone."""
    from eoctl.sources.kafka import partition_offsets

    assert source.kafka is not None
    plans = []
    for po in partition_offsets(config.kafka[source.kafka], source.topics):
        end = ends.get(po.topic, {}).get(po.partition)
        if end is None:
            plans.append(PartitionPlan(po.topic, po.partition, EARLIEST))
            continue
        if po.high_watermark < end:
            return None, (f"{po.topic}[{po.partition}] ends at {po.high_watermark}, below the {end} the "
                          "record index read (topic recreated?): full scan")
        # From the indexed end, not the committed offset: a record never changes, and its in-flight
        # status is recomputed for index rows, so re-reading the consumer lag would buy nothing.
        # Records below the log start offset are gone: a full read could not see them either, and
        # Spark refuses to start a batch read below it.
        plans.append(PartitionPlan(po.topic, po.partition, max(end, po.log_start), po.log_start))
    return plans, None


def archive_plan(ends: dict[str, dict[int, int]]) -> list[PartitionPlan]:
    """Per partition the index knows; partitions it does not know are read whole."""
    return [PartitionPlan(t, p, end)
            for t, parts in sorted(ends.items()) for p, end in sorted(parts.items())]


def kafka_ranges(plans: list[PartitionPlan]) -> list[OffsetRange]:
    return [OffsetRange(p.topic, p.partition, p.start, LATEST) for p in plans]


def archive_predicate(plans: list[PartitionPlan]) -> Column:
    """Archive rows at or after their partition's start, and every row of unknown partitions. An
    OR of simple comparisons, so Parquet skips the row groups of old files by their statistics."""
    from functools import reduce

    from pyspark.sql import functions as F

    def part(p: PartitionPlan) -> Column:
        return (F.col("topic") == p.topic) & (F.col("partition") == p.partition)

    known = reduce(lambda a, b: a | b, (part(p) for p in plans))
    fresh = reduce(lambda a, b: a | b, (part(p) & (F.col("offset") >= p.start) for p in plans))
    return fresh | ~known


# ------------------------------------------------------------------------- index lifecycle


def publish(spark: SparkSession, config: Config, run_id: str, partial: str) -> str:
    """Rename a complete partial index into place; only then can a history row name it."""
    final = f"{records_root(config)}/{run_id}"
    fs, src = _fs(spark, partial)
    if not fs.rename(src, _hpath(spark, final)):
        from eoctl.errors import SourceError

        raise SourceError(f"the record index {partial} could not be renamed to {final}")
    return final


def prune(spark: SparkSession, config: Config) -> list[str]:
    """Delete every index but the newest recorded ones, and partial indexes of killed audits.
    Returns the paths deleted."""
    from eoctl.history import indexed_runs

    root = records_root(config)
    fs, hroot = _fs(spark, root)
    if not fs.exists(hroot):
        return []
    kept = set()
    for run_id, text in indexed_runs(config):
        index = RecordIndex.from_json(run_id, text)
        if index is not None and _exists(spark, index.path):
            kept.add(index.path.rstrip("/").rsplit("/", 1)[-1])
            if len(kept) == _KEEP:
                break
    cutoff = (dt.datetime.now(dt.timezone.utc) - _PARTIAL_MAX_AGE).timestamp() * 1000
    deleted = []
    for status in fs.listStatus(hroot):
        name = status.getPath().getName()
        if name in kept or (name.startswith(_PARTIAL) and status.getModificationTime() > cutoff):
            continue  # a partial index younger than a day may be a running audit's
        fs.delete(status.getPath(), True)
        deleted.append(f"{root}/{name}")
    return deleted


def record(spark: SparkSession, config: Config, report: AuditReport) -> str:
    """Record an audit run in the findings history, with its record index: the index is dropped
    when the run cannot be recorded, and older indexes are dropped once it is."""
    from eoctl.history import record as record_run

    try:
        run_id = record_run(config, report)
    except BaseException:
        if report.index is not None:
            discard(spark, report.index.path)
        raise
    if report.index is not None:
        prune(spark, config)
    return run_id


def discard(spark: SparkSession, path: str) -> None:
    fs, hpath = _fs(spark, path)
    fs.delete(hpath, True)


def _hpath(spark: SparkSession, path: str):
    return spark.sparkContext._jvm.org.apache.hadoop.fs.Path(path)


def _fs(spark: SparkSession, path: str):
    """Hadoop's file system for `path`: it knows every scheme Spark writes to (file, hdfs, s3a)."""
    hpath = _hpath(spark, path)
    return hpath.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration()), hpath


def _exists(spark: SparkSession, path: str) -> bool:
    fs, hpath = _fs(spark, path)
    return bool(fs.exists(hpath))

"""The records every check reads on the Spark engine (the `records` view of eoctl.expr.inputs):
one scan of each source, given protocol columns and a `processed` flag (offset below the consumer's
committed offset), written once as the working copy; with `--since-last`, plus the rows of the
recorded run's index (eoctl.incremental) this run takes from it. Nothing is collected to the
driver but per-partition offsets and counts.
"""

from __future__ import annotations

import datetime as dt
from functools import cached_property
from typing import TYPE_CHECKING

from eoctl import incremental
from eoctl.config.model import Config, EndpointConfig
from eoctl.engine.spark.frames import local_frame
from eoctl.engine.spark.sources import read_input, with_protocol_columns
from eoctl.expr.records import RECORD_COLUMNS
from eoctl.incremental import (
    RecordIndex,
    Segment,
    archive_condition,
    discard,
    fingerprints,
    index_ends,
    merge_plan,
    publish,
    live_lows,
    run_folder,
    sealed,
    state_files,
)
from eoctl.sources import input_committed_offsets

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

    from eoctl.incremental import PartitionPlan
    from eoctl.options import AuditOptions

#: an eo-blobs header's parsed form
BLOB_REFS = "array<struct<uri: string, sha256: string>>"

#: the types of RECORD_COLUMNS, in that order
RECORD_DDL = (
    "endpoint string, topic string, partition int, offset long, timestamp timestamp, processed boolean, "
    "committed long, message_id string, token_id string, producer string, seq long, causation_id string, "
    "attempt_id string, blobs string, problem string"
)


class SparkRecords:
    def __init__(self, spark: SparkSession, config: Config, options: AuditOptions,
                 base: RecordIndex | None = None, index_path: str | None = None) -> None:
        """`base`: a recorded run's record index to continue from (`audit --since-last`);
        `index_path`: the (partial) folder of this run's part of the record index: its working
        copy becomes the run's segment."""
        self.spark = spark
        self.config = config
        self.options = options
        self.base = base
        self.index_path = index_path
        self.fallback: str | None = None  # why `base` was given up, if it was
        self.plans: dict[str, list[PartitionPlan]] = {}  # endpoint -> what was read from the source
        self._planned = False
        self._persisted: list[DataFrame] = []
        self._scratch: list[str] = []
        self._starts: dict[str, dict[tuple[str, int], int]] = {}
        self.probe = ArchiveFiles(spark)
        # the archives' files before anything is read: what this run's index lists, and what the
        # base's listing is compared with (RecordIndex.archives)
        self.archives = (incremental.archive_listings(self.probe, self.endpoints)
                         if base is not None or index_path else {})

    @property
    def endpoints(self) -> dict[str, EndpointConfig]:
        names = self.options.endpoints or list(self.config.endpoints)
        return {n: self.config.endpoint(n) for n in names}

    def keep_index(self) -> None:
        """The index is complete and about to be published: release() must not delete it."""
        if self.index_path in self._scratch:
            self._scratch.remove(self.index_path)

    def release(self) -> None:
        """Free what the run kept: cached frames and the scratch copy (also after a failure)."""
        from eoctl.engine.spark.files import HadoopFiles

        for df in self._persisted:
            df.unpersist()
        for path in self._scratch:
            HadoopFiles(self.spark).delete(path)
        self._scratch.clear()

    @cached_property
    def committed(self) -> dict[str, dict[str, dict[int, int]]]:
        """endpoint -> topic -> partition -> committed offset."""
        return {n: input_committed_offsets(self.config, ep.input) for n, ep in self.endpoints.items() if ep.input}

    @cached_property
    def fresh(self) -> DataFrame:
        """The records read from the source by this run (every record, without a base), with
        protocol columns, `processed` and `problem` (why a record's protocol headers are unusable,
        else null): the working copy, and this run's segment of the record index."""
        from functools import reduce

        from pyspark.sql import functions as F

        self._plan()
        frames = []
        for name, ep in self.endpoints.items():
            if ep.input is None:
                continue
            plans = self.plans.get(name)
            ranges = self.options.ranges
            if plans is not None and ep.input.kafka:
                ranges = incremental.kafka_ranges(plans)
            df = read_input(self.spark, self.config, ep.input, ranges, protocol=False)
            if plans and ep.input.archive:
                df = df.where(archive_predicate(plans))
            if self.options.since is not None:
                df = df.where(F.col("timestamp") >= F.lit(_utc(self.options.since)))
            if self.options.until is not None:
                df = df.where(F.col("timestamp") < F.lit(_utc(self.options.until)))
            frames.append(df.withColumn("endpoint", F.lit(name)))
        if not frames:
            return local_frame(self.spark, [], RECORD_DDL)
        raw = with_protocol_columns(reduce(lambda a, b: a.unionByName(b), frames), self.config.protocol.headers,
                                    text=False)
        # Only what the checks read is kept: the working copy is the audit's largest cost.
        # `blobs` stays text; the blob checks parse it for the few producers that publish blobs.
        return self._working_copy(working_copy_frame(self.spark, raw, self.commits_frame()))

    @cached_property
    def indexed(self) -> DataFrame | None:
        """The base index's rows this run takes from it (below each partition's start, not below
        its log start), with `committed` and `processed` from the current committed offsets; None
        without a base."""
        self._plan()
        if self.base is None:
            return None
        rows = self.segments_frame(self.base.segments).drop("committed", "processed")
        return self.bounded(rows, "committed").withColumn("processed", processed_flag()).select(*RECORD_COLUMNS)

    @cached_property
    def in_flight(self) -> DataFrame | None:
        """The rows of `indexed` not processed, read without the index's processed row groups
        (eoctl.incremental.in_flight_floor); None without a base."""
        from pyspark.sql import functions as F

        indexed = self.indexed
        if indexed is None:
            return None
        floor = incremental.in_flight_floor(self.plans, self.committed)
        return indexed.where(~F.col("processed") & (F.col("offset") >= floor if floor is not None else F.lit(True)))

    @cached_property
    def records(self) -> DataFrame:
        """All input records of the audited endpoints (RECORD_COLUMNS): what was read from the
        source, and what the base index holds."""
        indexed = self.indexed
        return self.fresh if indexed is None else self.fresh.unionByName(indexed)

    @cached_property
    def dropped(self) -> DataFrame | None:
        """The base index's rows now below their partition's log start (retention took them), of
        the audited endpoints; None when there can be none."""
        from functools import reduce

        from pyspark.sql import functions as F

        self._plan()
        lows = [(n, p) for n, plans in self.plans.items() for p in plans if p.low > 0]
        if self.base is None or not lows:
            return None
        # literal comparisons, not a join: Parquet reads only the row groups below a log start
        below = reduce(lambda a, b: a | b, (
            (F.col("endpoint") == n) & (F.col("topic") == p.topic) & (F.col("partition") == p.partition)
            & (F.col("offset") < p.low) for n, p in lows))
        return self.segments_frame(self.base.segments).where(below).select(*RECORD_COLUMNS)

    def record_count(self) -> int:
        """How many records the checks see. The index's share comes from its segments' counts, less
        the rows retention took (dropped), without reading the other rows; when the index holds
        endpoints this run does not audit, by counting `indexed`."""
        fresh = self.fresh.count()  # the working copy (Parquet files' footers, or the cached frame)
        if self.indexed is None:
            return fresh
        audited = {n for n, ep in self.endpoints.items() if ep.input is not None}
        if not set(self.base.inputs) <= audited:
            return fresh + self.indexed.count()
        dropped = self.dropped
        return fresh + sum(s.records for s in self.base.segments) - (dropped.count() if dropped is not None else 0)

    def bounded(self, df: DataFrame, committed: str | None = None) -> DataFrame:
        """The rows of `df` (records of a base index) this run takes from the index: of an audited
        partition, below where the source is read from, and not below the log start. `committed`:
        a column to add with the partition's committed offset."""
        from pyspark.sql import functions as F

        b = self._bounds  # one broadcast join gives both the bounds and the committed offset
        df = df.join(F.broadcast(b), (df.endpoint == b.b_endpoint) & (df.topic == b.b_topic)
                     & (df.partition == b.b_partition))
        df = df.where((F.col("offset") < F.col("b_start")) & (F.col("offset") >= F.col("b_low")))
        if committed:
            df = df.withColumn(committed, F.col("b_committed"))
        return df.drop("b_endpoint", "b_topic", "b_partition", "b_start", "b_low", "b_committed")

    @cached_property
    def _bounds(self) -> DataFrame:
        rows = [(n, p.topic, p.partition, p.start, p.low, self.committed.get(n, {}).get(p.topic, {}).get(p.partition))
                for n, plans in self.plans.items() for p in plans]
        return local_frame(self.spark, rows, "b_endpoint string, b_topic string, b_partition int, b_start long, "
                           "b_low long, b_committed long")

    def segments_frame(self, segments) -> DataFrame:
        """The records of index segments, as they were written."""
        if not segments:  # the base run read no record at all
            return local_frame(self.spark, [], RECORD_DDL)
        return self.spark.read.parquet(*(s.path for s in segments))

    def commits_frame(self) -> DataFrame:
        """Each audited partition's committed offset (eoctl.expr.records.COMMITS_SCHEMA)."""
        rows = [(n, t, p, o) for n, topics in self.committed.items() for t, parts in topics.items()
                for p, o in parts.items()]
        return local_frame(self.spark, rows, "c_endpoint string, c_topic string, c_partition int, committed long")

    def _plan(self) -> None:
        """Per endpoint, where the source is read from when continuing from `base`; gives `base`
        up (a full scan, `fallback` says why) when a live partition ends below what it read."""
        if self.base is None or self._planned:
            return
        self._planned = True
        plans, reason = incremental.plan_reads(self.config, self.endpoints, self.base, self.probe, self.archives)
        if plans is None:
            self.base, self.fallback = None, reason
            return
        self.plans = plans

    @cached_property
    def fresh_stats(self) -> list[tuple[str, str, int, int, int, int]]:
        """(endpoint, topic, partition, end offset, records, lowest offset) per partition of what
        this run read from the source: a small aggregate, for the index and the scan summary."""
        from pyspark.sql import functions as F

        out = self.fresh.groupBy("endpoint", "topic", "partition").agg(
            (F.max("offset") + 1).alias("end"), F.count(F.lit(1)).alias("n"),
            F.min("offset").alias("low")).collect()  # one row per partition
        return [(x["endpoint"], x["topic"], x["partition"], x["end"], x["n"], x["low"]) for x in out]

    def archive_starts(self, endpoint: str) -> dict[tuple[str, int], int]:
        """(topic, partition) -> the first offset an archive input holds (its log start). Without a
        base these are the lowest offsets read; continuing from a base that kept them (lows), they
        come from it and the new records, without reading the index; else from every record."""
        from pyspark.sql import functions as F

        if endpoint in self._starts:
            return self._starts[endpoint]
        base = self.base
        if base is not None and (base.lows is None or endpoint not in base.lows):
            rows = self.records.where(F.col("endpoint") == endpoint).groupBy("topic", "partition").agg(
                F.min("offset").alias("start")).collect()  # one row per partition
            starts = {(r["topic"], r["partition"]): r["start"] for r in rows}
        else:
            starts = {} if base is None else {
                (t, p): low for t, parts in base.lows[endpoint].items() for p, low in parts.items()}
            for name, topic, partition, _end, _n, low in self.fresh_stats:
                if name == endpoint:
                    starts[(topic, partition)] = min(low, starts.get((topic, partition), low))
        self._starts[endpoint] = starts
        return starts

    def _working_copy(self, df: DataFrame) -> DataFrame:
        """The records every check reads, computed once. Written as Parquet to the scratch folder
        when there is one: each check then reads only its columns, from files, within the default
        driver heap (measured at 10M records: 134 s against 170 s with Spark's cache, whose blocks
        spill to disk whole). Without one (a cluster, Spark Connect), Spark's cache."""
        import uuid

        from pyspark import StorageLevel

        from eoctl.scratch import subdir

        engine = self.config.engine
        if engine.remote or not (engine.scratch_dir or engine.master.startswith("local")):
            df = df.persist(StorageLevel.MEMORY_AND_DISK)
            self._persisted.append(df)
            if self.index_path:  # the cache is the working copy; the index still has to be files
                self._scratch.append(self.index_path)
                df.write.mode("overwrite").option("compression", "zstd").parquet(self.segment_path)
            return df
        if self.index_path:  # written once, where it stays as this run's segment of the record index
            self._scratch.append(self.index_path)
            path = self.segment_path
        else:
            if engine.scratch_dir:
                path = f"{engine.scratch_dir.rstrip('/')}/eoctl-audit-{uuid.uuid4().hex[:12]}"
            else:  # under the run's folder: removed with it, also after a kill (eoctl.scratch)
                path = str(subdir("audit") / uuid.uuid4().hex[:12])
            self._scratch.append(path)
        # zstd: measured at 10M records, 23 s and 65 MB to write against snappy's 26 s and 299 MB.
        df.write.mode("overwrite").option("compression", "zstd").parquet(path)
        return self.spark.read.parquet(path)

    @property
    def segment_path(self) -> str:
        assert self.index_path is not None
        return f"{self.index_path}/records"


def working_copy_frame(spark: SparkSession, protocol: DataFrame, commits: DataFrame) -> DataFrame:
    """RECORD_COLUMNS of records with their protocol headers as raw bytes (eoctl.expr.records.
    PROTOCOL_SCHEMA) and each partition's committed offset: the working copy's one expression
    (eoctl.expr.records.working_copy: `processed`, `seq`, `problem`), compiled to Spark SQL, as the
    DuckDB engine computes it."""
    import uuid

    from eoctl.expr import Dialect, compile_sql
    from eoctl.expr.records import (
        PROTOCOL_SCHEMA,
        commits_table,
        protocol_table,
        working_copy,
    )

    tag = uuid.uuid4().hex[:12]
    views = (f"eoctl_protocol_{tag}", f"eoctl_commits_{tag}")
    protocol.select(*PROTOCOL_SCHEMA.names).createOrReplaceTempView(views[0])
    commits.createOrReplaceTempView(views[1])
    try:
        # analysed here: the frame keeps its plan once the views are gone
        return spark.sql(compile_sql(working_copy(protocol_table(views[0]), commits_table(views[1]), Dialect.spark),
                                     Dialect.spark))
    finally:
        for view in views:
            spark.catalog.dropTempView(view)


def processed_flag() -> Column:
    """Processed: below the consumer's committed offset (no commit: nothing is processed)."""
    from pyspark.sql import functions as F

    return F.coalesce(F.col("offset") < F.col("committed"), F.lit(False))


def _utc(value: dt.datetime) -> dt.datetime:
    """A time as the UTC wall time the session compares with (an offset given is honoured)."""
    return value.astimezone(dt.timezone.utc).replace(tzinfo=None)


class ArchiveFiles:
    """The Spark engine's eoctl.incremental.ArchiveProbe: archives listed through Hadoop's file
    system (as Spark's file sources list them), the files added since an indexed run read by a
    job that stops at their first record below the indexed end."""

    def __init__(self, spark: SparkSession) -> None:
        self.spark = spark

    def listing(self, path: str) -> dict[str, int]:
        from eoctl.engine.spark.files import HadoopFiles

        return HadoopFiles(self.spark).listing(path)

    def holds_below(self, source, files: list[str], plans: list[PartitionPlan]) -> bool:
        from pyspark.sql import functions as F

        from eoctl.engine.spark.sources import read_archive
        from eoctl.incremental import below_end_condition

        root = source.archive.rstrip("/")
        df = read_archive(self.spark, source.archive, source.archive_format, source.topics,
                          files=[f"{root}/{f}" for f in files])
        return not df.where(F.expr(below_end_condition(plans, lambda c: f"`{c}`"))).isEmpty()


def archive_predicate(plans: list[PartitionPlan]) -> Column:
    """archive_condition as a Spark column."""
    from pyspark.sql import functions as F

    return F.expr(archive_condition(plans, lambda c: f"`{c}`"))


def keep(spark: SparkSession, config: Config, run_id: str, partial: str, records: SparkRecords,
         stats: list, states: dict[str, tuple[int, int]]) -> RecordIndex:
    """Complete this run's part of the record index (a merge of the newest segments when one is
    due) and publish it; the history row will name it."""
    from functools import reduce

    from eoctl.expr.records import RECORD_COLUMNS

    folder = run_folder(config, run_id)
    segments = list(records.base.segments) if records.base is not None else []
    fresh = sum(row[4] for row in stats)
    if fresh:
        segments.append(Segment(f"{folder}/records", fresh))
    merge = merge_plan(segments)
    if merge:
        segments, merged = segments[:-merge], segments[-merge:]
        older = [s for s in merged if not s.path.startswith(folder + "/")]
        frames = [records.bounded(records.segments_frame(older)).select(*RECORD_COLUMNS)] if older else []
        if len(older) < len(merged):  # this run's own segment is merged too
            frames.append(records.fresh)
        reduce(lambda a, b: a.unionByName(b), frames).write.mode("overwrite").option(
            "compression", "zstd").parquet(f"{partial}/merged")
        count = spark.read.parquet(f"{partial}/merged").count()  # from the files' footers
        if len(older) < len(merged):
            discard(spark, records.segment_path)
        segments.append(Segment(f"{folder}/merged", count))
    ends = index_ends(records.plans, stats)
    records.keep_index()
    publish(spark, config, run_id, partial)
    return sealed(spark, RecordIndex(run_id, tuple(segments), fingerprints(config, records.endpoints), ends,
                                     records.committed, records.options.now.isoformat(), _lows(records, stats),
                                     state_files(folder, states), records.archives), folder)


def _lows(records: SparkRecords, stats: list) -> dict[str, dict[str, dict[int, int]]]:
    """The index's lowest offset per partition of each input (RecordIndex.lows): an archive's first
    offset, a live topic's lowest indexed (eoctl.incremental.live_lows)."""
    live = {n for n, ep in records.endpoints.items() if ep.input is not None and ep.input.kafka}
    lows = live_lows(records.base, records.plans, stats, live)
    for name, ep in records.endpoints.items():
        if ep.input is not None and ep.input.archive:
            lows[name] = {}
            for (topic, partition), low in records.archive_starts(name).items():
                lows[name].setdefault(topic, {})[partition] = low
    return lows

"""What every check reads, prepared once: one scan of each source, shared by all checks.

Records of every endpoint's input are read once, given protocol columns and a `processed` flag
(offset below the consumer's committed offset), and persisted; store tables and pending outbox
entries are read lazily, once each. Nothing here collects records to the driver.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from eoctl import incremental
from eoctl.config.model import Config, EndpointConfig, SinkConfig
from eoctl.engine.frames import local_frame
from eoctl.sources import OffsetRange, input_committed_offsets, read_input
from eoctl.sources.tables import read_endpoint_table
from eoctl.stores.layout import KINDS, StoreLayout

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from eoctl.incremental import PartitionPlan, RecordIndex

BLOB_REFS = "array<struct<uri: string, sha256: string>>"
OUTGOING = "array<struct<message_id: string, token_id: string, topic: string, key: string, headers: map<string, string>>>"


@dataclass
class AuditOptions:
    now: dt.datetime = field(default_factory=lambda: dt.datetime.now(dt.timezone.utc))
    grace: dt.timedelta = dt.timedelta(hours=24)
    stuck_after: dt.timedelta = dt.timedelta(minutes=15)
    transaction_timeout: dt.timedelta = dt.timedelta(minutes=15)
    endpoints: list[str] | None = None
    ranges: list[OffsetRange] | None = None
    since: dt.datetime | None = None  # only records at or after this time
    until: dt.datetime | None = None  # only records before this time
    evidence_rows: int = 1000  # inline evidence rows per finding; the rest go to Parquet
    evidence_dir: Path | None = None
    since_last: bool = False  # continue from the record index of the last recorded run
    keep_index: bool = False  # keep the working copy as this run's record index (it is recorded)


class AuditContext:
    def __init__(self, spark: SparkSession, config: Config, options: AuditOptions,
                 base: RecordIndex | None = None, index_path: str | None = None) -> None:
        """`base`: a recorded run's record index to continue from (`audit --since-last`);
        `index_path`: the (partial) folder of this run's part of the record index: its working
        copy becomes the run's segment, its check states are written beside it."""
        self.spark = spark
        self.config = config
        self.options = options
        self.base = base
        self.index_path = index_path
        self.fallback: str | None = None  # why `base` was given up, if it was
        self.plans: dict[str, list[PartitionPlan]] = {}  # endpoint -> what was read from the source
        self._planned = False
        self.carried_state: set[str] = set()  # check states continued from the base run
        self.state_out: dict[str, DataFrame] = {}  # check states this run computed, for the next
        self.rebuilt: dict[str, str] = {}  # check states the base had but this run rebuilt: why
        self._persisted: list[DataFrame] = []
        self._shared: dict[tuple, DataFrame] = {}
        self._values: dict[tuple, Any] = {}
        self._scratch: list[str] = []

    # --------------------------------------------------------------------------- endpoints

    @property
    def endpoints(self) -> dict[str, EndpointConfig]:
        names = self.options.endpoints or list(self.config.endpoints)
        return {n: self.config.endpoint(n) for n in names}

    def ts(self, delta: dt.timedelta):
        """A timestamp literal `delta` before now (UTC, as the session is)."""
        from pyspark.sql import functions as F

        return F.lit((self.options.now - delta).astimezone(dt.timezone.utc).replace(tzinfo=None))

    def persist(self, df: DataFrame) -> DataFrame:
        from pyspark import StorageLevel

        df = df.persist(StorageLevel.MEMORY_AND_DISK)
        self._persisted.append(df)
        return df

    def keys(self, df: DataFrame, probe: bool = False) -> DataFrame:
        """Persist and compute `df` now: the keys a cheap aggregate flagged, or the keys new records
        touch, usually few. Once computed, Spark knows their real size and broadcasts them into the
        joins that gather evidence, instead of shuffling the records to meet them (it cannot know
        it in advance). `probe`: keys to probe every indexed record (or a store) with, which a
        shuffle would move whole: broadcast them whenever they are at most PROBE_ROWS."""
        from pyspark.sql import functions as F

        df = self.persist(df)
        rows = df.count()
        return F.broadcast(df) if probe and rows <= PROBE_ROWS else df

    def keep_index(self) -> None:
        """The index is complete and about to be published: release() must not delete it."""
        if self.index_path in self._scratch:
            self._scratch.remove(self.index_path)

    def release(self) -> None:
        """Free what the audit kept: cached frames and the scratch copy (also after a failure)."""
        for df in self._persisted:
            df.unpersist()
        for path in self._scratch:
            _delete_tree(self.spark, path)
        self._scratch.clear()

    # ----------------------------------------------------------------------------- records

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
            df = read_input(self.spark, self.config, ep.input, ranges)
            if plans and ep.input.archive:
                df = df.where(incremental.archive_predicate(plans))
            if self.options.since is not None:
                df = df.where(F.col("timestamp") >= F.lit(_utc(self.options.since)))
            if self.options.until is not None:
                df = df.where(F.col("timestamp") < F.lit(_utc(self.options.until)))
            frames.append(df.withColumn("endpoint", F.lit(name)))
        if not frames:
            return local_frame(self.spark, [], RECORD_DDL)
        df = with_problem(self.with_processed(reduce(lambda a, b: a.unionByName(b), frames)))
        # Only what the checks read is kept: the working copy is the audit's largest cost.
        # `blobs` stays text; the blob checks parse it for the few producers that publish blobs.
        return self._working_copy(df.select(*RECORD_COLUMNS))

    @cached_property
    def indexed(self) -> DataFrame | None:
        """The base index's rows this run takes from it (below each partition's start, not below
        its log start), with `committed` and `processed` from the current committed offsets; None
        without a base."""
        self._plan()
        if self.base is None:
            return None
        return self.with_progress(self.segments_frame(self.base.segments).drop("committed", "processed")).select(
            *RECORD_COLUMNS)

    def with_progress(self, df: DataFrame) -> DataFrame:
        """Rows of the base index (records, or a check state's) this run takes from it (bounded()),
        with `committed` and `processed` from the current committed offsets."""
        # one broadcast join gives both the bounds and the committed offset of each row's partition
        return self.bounded(df, "committed").withColumn("processed", processed_flag())

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
        """The rows of `df` (records, or the check state's records, of a base index) this run takes
        from the index: of an audited partition, below where the source is read from, and not
        below the log start. `committed`: a column to add with the partition's committed offset."""
        from pyspark.sql import functions as F

        df = self._with_bounds(df)
        df = df.where((F.col("offset") < F.col("b_start")) & (F.col("offset") >= F.col("b_low")))
        if committed:
            df = df.withColumn(committed, F.col("b_committed"))
        return df.drop("b_endpoint", "b_topic", "b_partition", "b_start", "b_low", "b_committed")

    def _with_bounds(self, df: DataFrame) -> DataFrame:
        """`df` (rows of audited partitions only) with their partition's plan: b_start, b_low,
        b_committed."""
        from pyspark.sql import functions as F

        b = self._bounds
        return df.join(F.broadcast(b), (df.endpoint == b.b_endpoint) & (df.topic == b.b_topic)
                       & (df.partition == b.b_partition))

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

    def carried(self, name: str) -> DataFrame | None:
        """The base run's state of a check (see eoctl.incremental), or None: no base, or the base
        run did not run that check (its state then has to be computed from every record)."""
        df = self.base_state(name)
        if df is not None:
            self.carried_state.add(name)
        return df

    @property
    def keeps_state(self) -> bool:
        """Whether check states matter to this run: it keeps a record index or continues one."""
        self._plan()
        return self.index_path is not None or self.base is not None

    def base_state(self, name: str) -> DataFrame | None:
        """Like carried(), for a state read to decide whether a check can continue (a sink's
        watermark): reading it does not count the check as continued."""
        self._plan()
        if self.base is None or name not in self.base.state:
            return None
        return self.spark.read.parquet(self.base.state[name])

    def state(self, name: str, build) -> DataFrame:
        """A check's state for the next `--since-last` run, built and persisted once."""
        df = self.cached(("state", name), build)
        self.state_out[name] = df
        return df

    def built_state(self, name: str) -> DataFrame | None:
        """A check state this run has already built (another check may read it), else None."""
        return self._shared.get(("state", name))

    def with_processed(self, df: DataFrame) -> DataFrame:
        """Records (of this run or a check state) with `committed` and `processed` from the current
        committed offsets."""
        return self._with_committed(df).withColumn("processed", processed_flag())

    def commits_frame(self) -> DataFrame:
        """Each audited partition's committed offset (eoctl.expr.records.COMMITS_SCHEMA)."""
        rows = [(n, t, p, o) for n, topics in self.committed.items() for t, parts in topics.items()
                for p, o in parts.items()]
        return local_frame(self.spark, rows, "c_endpoint string, c_topic string, c_partition int, committed long")

    def _with_committed(self, df: DataFrame) -> DataFrame:
        """`df` with the consumer's current committed offset of each record's partition."""
        from pyspark.sql import functions as F

        c = self.commits_frame()
        return df.join(F.broadcast(c), (df.endpoint == c.c_endpoint) & (df.topic == c.c_topic)
                       & (df.partition == c.c_partition), "left").drop("c_endpoint", "c_topic", "c_partition")

    def _plan(self) -> None:
        """Per endpoint, where the source is read from when continuing from `base`; gives `base`
        up (a full scan, `fallback` says why) when a live partition ends below what it read."""
        if self.base is None or self._planned:
            return
        self._planned = True
        plans, reason = incremental.plan_reads(self.config, self.endpoints, self.base)
        if plans is None:
            self.base, self.fallback = None, reason
            return
        self.plans = plans

    def fresh_stats(self) -> list[tuple[str, str, int, int, int, int]]:
        """(endpoint, topic, partition, end offset, records, lowest offset) per partition of what
        this run read from the source: a small aggregate, for the index and the scan summary."""
        from pyspark.sql import functions as F

        def compute():
            out = self.fresh.groupBy("endpoint", "topic", "partition").agg(
                (F.max("offset") + 1).alias("end"), F.count(F.lit(1)).alias("n"),
                F.min("offset").alias("low")).collect()  # one row per partition
            return [(x["endpoint"], x["topic"], x["partition"], x["end"], x["n"], x["low"]) for x in out]
        return self.once(("fresh-stats",), compute)

    def archive_starts(self, endpoint: str) -> dict[tuple[str, int], int]:
        """(topic, partition) -> the first offset an archive input holds (its log start). Without a
        base these are the lowest offsets read; continuing from a base that kept them (lows), they
        come from it and the new records, without reading the index; else from every record."""
        from pyspark.sql import functions as F

        def compute():
            base = self.base
            if base is not None and (base.lows is None or endpoint not in base.lows):
                rows = self.records.where(F.col("endpoint") == endpoint).groupBy("topic", "partition").agg(
                    F.min("offset").alias("start")).collect()  # one row per partition
                return {(r["topic"], r["partition"]): r["start"] for r in rows}
            starts = {} if base is None else {
                (t, p): low for t, parts in base.lows[endpoint].items() for p, low in parts.items()}
            for name, topic, partition, _end, _n, low in self.fresh_stats():
                if name == endpoint:
                    starts[(topic, partition)] = min(low, starts.get((topic, partition), low))
            return starts
        return self.once(("archive-starts", endpoint), compute)

    def _working_copy(self, df: DataFrame) -> DataFrame:
        """The records every check reads, computed once. Written as Parquet to the scratch folder
        when there is one: each check then reads only its columns, from files, within the default
        driver heap (measured at 10M records: 134 s against 170 s with Spark's cache, whose blocks
        spill to disk whole). Without one (a cluster, Spark Connect), Spark's cache."""
        import uuid

        from eoctl.scratch import subdir

        engine = self.config.engine
        if engine.remote or not (engine.scratch_dir or engine.master.startswith("local")):
            df = self.persist(df)
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

    @cached_property
    def valid_records(self) -> DataFrame:
        from pyspark.sql import functions as F

        return self.records.where(F.col("problem").isNull())

    @cached_property
    def valid_fresh(self) -> DataFrame:
        from pyspark.sql import functions as F

        return self.fresh.where(F.col("problem").isNull())

    @cached_property
    def valid_indexed(self) -> DataFrame:
        from pyspark.sql import functions as F

        assert self.indexed is not None
        return self.indexed.where(F.col("problem").isNull())

    # ------------------------------------------------------------------------------ stores

    def table(self, endpoint: str, key: str) -> DataFrame | None:
        """An endpoint's tokens/outbox/intents table with canonical column names, or None."""
        return self._tables.get((endpoint, key))

    @cached_property
    def layout(self) -> StoreLayout:
        """Which rows of each store table are whose (shared tables), and which tables exist."""
        return StoreLayout(self.config)

    @cached_property
    def _tables(self) -> dict[tuple[str, str], DataFrame]:
        out: dict[tuple[str, str], DataFrame] = {}
        for name in self.endpoints:
            for key in KINDS:
                t = self.layout.table(name, key)
                if t is not None:
                    out[(name, key)] = self.persist(read_endpoint_table(self.spark, t))
        return out

    def notes(self) -> list[str]:
        """What this run could not use (an optional table that does not exist), for the report."""
        return self.layout.notes(list(self.endpoints))

    @cached_property
    def pending_outgoing(self) -> DataFrame:
        """Every outgoing message of every pending outbox entry: what will still be sent.

        Columns: sender, incoming_message_id, entry_attempt_id, message_id, token_id, topic,
        producer, seq, blob_refs.
        """
        from functools import reduce

        from pyspark.sql import functions as F

        frames = []
        for name in self.endpoints:
            outbox = self.table(name, "outbox")
            if outbox is None:
                continue
            m = outbox.select(
                F.lit(name).alias("sender"), "incoming_message_id", F.col("attempt_id").alias("entry_attempt_id"),
                F.explode_outer(F.from_json(F.col("outgoing").cast("string"), OUTGOING)).alias("m"),
            ).where(F.col("m").isNotNull())
            frames.append(m.select(
                "sender", "incoming_message_id", "entry_attempt_id", "m.message_id", "m.token_id", "m.topic",
                F.col("m.headers")[self.config.protocol.headers.producer].alias("producer"),
                F.col("m.headers")[self.config.protocol.headers.sequence].try_cast("long").alias("seq"),
                F.from_json(F.col("m.headers")[self.config.protocol.headers.blobs], BLOB_REFS).alias("blob_refs"),
            ))
        if not frames:
            return local_frame(self.spark, [], _EMPTY_OUTGOING)
        return self.persist(reduce(lambda a, b: a.unionByName(b), frames))

    @cached_property
    def intents(self) -> DataFrame | None:
        """Every audited endpoint's intents: a sender registers tokens it creates in other stores."""
        from functools import reduce

        frames = [df for (_, key), df in self._tables.items() if key == "intents"]
        return reduce(lambda a, b: a.unionByName(b), frames) if frames else None

    def blob_listing(self, name: str, with_hash: bool, list_all) -> DataFrame:
        """Every blob under endpoint `name`'s prefix (`list_all()`: name, size, modified[,
        actual_sha256]), listed once for every check that reads it."""
        return self.cached(("blobs", name, with_hash), list_all)

    def once(self, key: tuple, compute):
        """A value several checks share (a sink's watermarks), computed once."""
        if key not in self._values:
            self._values[key] = compute()
        return self._values[key]

    def cached(self, key: tuple, build) -> DataFrame:
        """A frame several checks share (a blob listing, a sink), built and persisted once."""
        if key not in self._shared:
            self._shared[key] = self.persist(build())
        return self._shared[key]

    def sink(self, endpoint: str, sink: SinkConfig) -> DataFrame:
        """A sink table, read once for every check that looks at it. Parquet and ORC sinks are not
        cached: reading just the columns a check needs costs less than caching every column."""
        from eoctl.sources.tables import read_table

        key = ("sink", endpoint, sink.name)
        if sink.format in ("parquet", "orc"):
            if key not in self._shared:
                self._shared[key] = read_table(self.spark, self.config, sink)
            return self._shared[key]
        return self.cached(key, lambda: read_table(self.spark, self.config, sink))

    @cached_property
    def referenced_tokens(self) -> DataFrame:
        """Token ids that pending entries hold: their incoming token and their outgoing tokens."""
        from functools import reduce

        from pyspark.sql import functions as F

        frames = [self.pending_outgoing.select("token_id")]
        for name in self.endpoints:
            outbox = self.table(name, "outbox")
            if outbox is not None:
                frames.append(outbox.select(F.col("incoming_token_id").alias("token_id")))
        return reduce(lambda a, b: a.unionByName(b), frames).where(F.col("token_id").isNotNull()).distinct()


def with_problem(df: DataFrame) -> DataFrame:
    """Records with protocol columns, plus `seq` (eo-sequence as a number) and `problem`: why the
    record's protocol headers are unusable (EO105), else null. The one definition the audit's scan
    and trace's both apply."""
    from pyspark.sql import functions as F

    df = df.withColumn("seq", F.col("sequence").try_cast("long"))
    valid = lambda c: F.coalesce(F.is_valid_utf8(F.col(c)), F.lit(True))  # noqa: E731
    return df.withColumn(
        "problem",
        F.when(F.col("message_id").isNull() | F.col("token_id").isNull(),
               F.lit("missing eo-message-id or eo-token-id header"))
        .when(~(valid("message_id") & valid("token_id") & valid("producer") & valid("sequence")
                & valid("causation_id") & valid("attempt_id") & valid("blobs")),
              F.lit("protocol header is not UTF-8"))
        .when(F.col("sequence").isNotNull() & F.col("seq").isNull(), F.lit("eo-sequence is not an integer"))
        .when(F.col("blobs").isNotNull() & F.from_json("blobs", BLOB_REFS).isNull(),
              F.lit("eo-blobs is not a JSON list of {uri, sha256}")),
    )


def _utc(value: dt.datetime) -> dt.datetime:
    """A time as the UTC wall time the session compares with (an offset given is honoured)."""
    return value.astimezone(dt.timezone.utc).replace(tzinfo=None)


def processed_flag():
    """Processed: below the consumer's committed offset (no commit: nothing is processed)."""
    from pyspark.sql import functions as F

    return F.coalesce(F.col("offset") < F.col("committed"), F.lit(False))


def _delete_tree(spark: SparkSession, path: str) -> None:
    from eoctl.engine.files import HadoopFiles

    HadoopFiles(spark).delete(path)


#: the most keys AuditContext.keys broadcasts into a probe (a million 64-bit hashes: ~8 MB per task)
PROBE_ROWS = 1_000_000

#: the columns of AuditContext.records
RECORD_COLUMNS = ("endpoint", "topic", "partition", "offset", "timestamp", "processed", "committed", "message_id",
                  "token_id", "producer", "seq", "causation_id", "attempt_id", "blobs", "problem")
#: the types of RECORD_COLUMNS, in that order
RECORD_DDL = (
    "endpoint string, topic string, partition int, offset long, timestamp timestamp, processed boolean, "
    "committed long, message_id string, token_id string, producer string, seq long, causation_id string, "
    "attempt_id string, blobs string, problem string"
)
_EMPTY_OUTGOING = (
    f"sender string, incoming_message_id string, entry_attempt_id string, message_id string, token_id string, "
    f"topic string, producer string, seq long, blob_refs {BLOB_REFS}"
)

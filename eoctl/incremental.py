"""`eoctl audit --since-last`: an audit that reads from the source only what the last recorded run
did not see, and takes the rest from that run's record index.

A recorded audit keeps its *record index*: Parquet segments holding every record the audit saw
(RECORD_COLUMNS). Each run adds one segment with the records it read from the source, so the index
is never rewritten whole; the newest segments are merged like a binary counter (see merge_plan),
which keeps the rewriting proportional to what was added. Both engines write and read the same
index, so a run on one can continue from a run on the other.

The next `--since-last` run reads the source from the indexed end on, recomputes the index rows'
`committed`/`processed` from the current committed offsets, and gives each check the new records
and the indexed ones that can change its findings (eoctl.expr.incremental: found through small
*states* the recorded run kept beside its segments, and probes of the index's key columns). The
findings are those of a full audit (tested after random appends, on both engines), without
reading the source again or running a check over every record.

What this assumes, and a full audit does not: a partition's records below the indexed end do not
change. True for Kafka (an append-only log; records below the log start offset are dropped from
the index as a full read would not see them either), and for topic archives that are appended to:
each index lists its archives' files, and a run whose archive lost or changed a listed file, or
gained one holding records below the indexed end (a late file), is a full scan that says why
(archive_change). A compacted topic needs a full audit.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from eoctl.config.model import Config, EndpointConfig, TopicInput
from eoctl.sources.kafka import EARLIEST, LATEST, OffsetRange

if TYPE_CHECKING:
    from eoctl.findings import AuditReport
    from eoctl.options import AuditOptions

#: Bumped whenever the derived columns of the working copy or the index's layout change: an index
#: written by another version would otherwise mix old and new derivations in one audit. 4: the
#: states of eoctl.expr.incremental beside the segments.
INDEX_VERSION = 6  # 5: each segment's bytes, checked before an index is trusted; 6: each archive's files, each
# folder's checksum
NO_BASE = "no earlier run to continue from: full scan"
_PARTIAL = "partial-"
_KEEP = 2  # indexes kept: the newest, and the one before for an audit still reading it
MAX_SEGMENTS = 16  # a cap: the merge rule keeps about log2(indexed / added per run) segments
_PARTIAL_MAX_AGE = dt.timedelta(hours=24)  # an older partial index is a killed audit's
_TOPIC_NAME = re.compile(r"[A-Za-z0-9._-]+")


@dataclass(frozen=True)
class Segment:
    """One Parquet folder of the record index, how many records it holds, its bytes and their
    checksum (measured once published: a folder that no longer holds them is never read as the
    index)."""

    path: str
    records: int
    bytes: int | None = None
    checksum: str | None = None  # IndexFiles.checksum; None where the file system gives none


@dataclass(frozen=True)
class StateFile:
    """One state of eoctl.expr.incremental, as a recorded run kept it: a Parquet folder."""

    path: str
    rows: int
    bytes: int
    checksum: str | None = None


@dataclass(frozen=True)
class RecordIndex:
    """A recorded run's record index: its segments, what inputs it covers, how far it read."""

    run_id: str
    segments: tuple[Segment, ...]
    inputs: dict[str, str]  # endpoint -> fingerprint of its input
    ends: dict[str, dict[str, dict[int, int]]]  # endpoint -> topic -> partition -> max offset + 1
    # what the run's `processed` flags and store reads were taken against (absent in older indexes)
    committed: dict[str, dict[str, dict[int, int]]] | None = None  # endpoint -> topic -> partition -> offset
    started_at: str | None = None  # ISO time the run started, before it read anything
    # archive inputs: endpoint -> topic -> partition -> lowest offset indexed, the archive's log
    # start (its old files never change), so EO204 need not read the index for it
    lows: dict[str, dict[str, dict[int, int]]] | None = None
    #: the states kept for the next run (eoctl.expr.incremental.STATES): name -> its folder, rows, bytes
    states: dict[str, StateFile] | None = None
    #: archive inputs: endpoint -> the archive's data files (path under the archive -> bytes), as
    #: listed when the run started: a file changed or gone, or a new one holding records below
    #: the indexed end, means the index no longer describes the archive (archive_change)
    archives: dict[str, dict[str, int]] | None = None

    def to_json(self) -> str:
        return json.dumps({"version": INDEX_VERSION,
                           "segments": [[s.path, s.records, s.bytes, s.checksum] for s in self.segments],
                           "inputs": self.inputs, "ends": self.ends,
                           "committed": self.committed, "started_at": self.started_at, "lows": self.lows,
                           "states": {n: [f.path, f.rows, f.bytes, f.checksum] for n, f in (self.states or {}).items()},
                           "archives": self.archives},
                          sort_keys=True)

    @classmethod
    def from_json(cls, run_id: str, text: str) -> RecordIndex | None:
        raw = json.loads(text)
        if raw.get("version") != INDEX_VERSION:
            return None
        def offsets(tree: dict) -> dict[str, dict[str, dict[int, int]]]:
            return {ep: {t: {int(p): int(o) for p, o in parts.items()} for t, parts in topics.items()}
                    for ep, topics in tree.items()}
        committed, lows = raw.get("committed"), raw.get("lows")
        states = {n: StateFile(p, int(r), int(b), c) for n, (p, r, b, c) in (raw.get("states") or {}).items()}
        segments = tuple(Segment(p, int(r), int(b) if b is not None else None, c) for p, r, b, c in raw["segments"])
        archives = {n: {str(f): int(b) for f, b in files.items()} for n, files in (raw.get("archives") or {}).items()}
        return cls(run_id, segments, raw["inputs"], offsets(raw["ends"]),
                   offsets(committed) if committed is not None else None, raw.get("started_at"),
                   offsets(lows) if lows is not None else None, states, archives)

    @property
    def paths(self) -> list[str]:
        """Every folder the index reads: its segments and its states."""
        return [s.path for s in self.segments] + [f.path for f in (self.states or {}).values()]

    def damage(self, files: Any) -> str | None:
        """What of the index is not as it was recorded (a folder gone, or of other bytes: truncated,
        rewritten, replaced), in words; None when every folder holds what the index recorded."""
        expected = ([(s.path, s.bytes, s.checksum) for s in self.segments]
                    + [(f.path, f.bytes, f.checksum) for f in (self.states or {}).values()])
        for path, size, checksum in expected:
            if not files.exists(path):
                return f"{path} is gone"
            if size is None:
                return f"{path}'s size was not recorded"
            found = files.size(path)
            if found != size:
                return f"{path} holds {found:,} bytes where the index recorded {size:,}"
        # the checksums once every size matched: a garbled file of the same size (a read of each)
        for path, _size, checksum in expected:
            if checksum is not None and folder_checksum(files, path) != checksum:
                return f"{path} holds other bytes than the index recorded (checksum {checksum} differs)"
        return None


def sealed(spark: Any, index: RecordIndex, folder: str) -> RecordIndex:
    """`index` with the bytes and checksum of this run's own folders (under `folder`, just
    published) measured: what a later run checks before it trusts them (RecordIndex.damage)."""
    from dataclasses import replace

    from eoctl.engine.files import index_files

    files = index_files(spark)

    def own(path: str) -> bool:
        return path.startswith(folder + "/")

    segments = tuple(replace(s, bytes=files.size(s.path), checksum=folder_checksum(files, s.path)) if own(s.path)
                     else s for s in index.segments)
    states = {n: replace(f, checksum=folder_checksum(files, f.path)) if own(f.path) else f
              for n, f in (index.states or {}).items()}
    return replace(index, segments=segments, states=states)


def folder_checksum(files: Any, path: str) -> str | None:
    """CRC-32 of the data files of an index folder on a local file system (IndexFiles.listing's,
    by name): the corruption check Hadoop's `.crc` files make, not a defence against tampering;
    the same on both engines. None elsewhere (hdfs, s3): a read of every byte through the
    driver would cost more than the check is worth; their sizes are still compared."""
    import zlib

    local = path.removeprefix("file://") if path.startswith("file://") else path.removeprefix("file:")
    if "://" in local:
        return None
    root = Path(local)
    names = [root] if root.is_file() else [root / rel for rel in sorted(files.listing(path))]
    crc = 0
    for name in names:
        with open(name, "rb") as f:
            while block := f.read(1 << 20):
                crc = zlib.crc32(block, crc)
    return f"crc32:{crc:08x}"


def merge_plan(segments: list[Segment]) -> int:
    """How many of the newest segments to merge into one, once a run has added its own: walking
    from the newest, each segment no larger than the newer ones together joins the merge (a binary
    counter: a record is rewritten only into a segment at least twice as large, so a logarithmic
    number of times, and a run's merge costs in proportion to what recent runs added). Past
    MAX_SEGMENTS the newest are merged regardless. 0 or 1: nothing to merge."""
    count, total = 0, 0
    for seg in reversed(segments):
        if count and seg.records > total and len(segments) - count < MAX_SEGMENTS:
            break
        count, total = count + 1, total + seg.records
    return count if count > 1 else 0


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
    (no --range/--since/--until), and be written where the driver can rename it (the DuckDB
    engine, a local master, or `[history] records` set to a folder every executor reaches; never
    Spark Connect, whose client has no file system API)."""
    engine = config.engine
    if options.ranges or options.since or options.until or engine.remote:
        return False
    return engine.kind == "duckdb" or bool(config.history.records) or engine.master.startswith("local")


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


def find_base(spark: Any, config: Config,
              endpoints: dict[str, EndpointConfig]) -> tuple[RecordIndex | None, str | None]:
    """The newest recorded run whose index covers every audited input unchanged, if its index is
    there as it was recorded, and else why the newest that covered them was not taken (a full
    scan says so: a damaged index is never read, so it never gives wrong findings). `spark`:
    None on the DuckDB engine (the index is the same files on both)."""
    index, why = newest_intact(spark, config, endpoints)
    return index, (f"{NO_BASE} ({why}; this run reads every record)" if why else None)


def newest_intact(spark: Any, config: Config,
                  endpoints: dict[str, EndpointConfig]) -> tuple[RecordIndex | None, str | None]:
    """find_base's index, else why the newest index of these inputs is not taken (None: no run
    kept one)."""
    from eoctl.engine.files import index_files
    from eoctl.history import indexed_runs

    files = index_files(spark)
    wanted = fingerprints(config, endpoints)
    why: str | None = None
    for run_id, text in indexed_runs(config):
        try:
            index = RecordIndex.from_json(run_id, text)
        except (ValueError, KeyError, TypeError, IndexError):
            why = why or f"the record index of run {run_id} cannot be read from the findings history"
            continue
        if index is None:
            why = why or f"the record index of run {run_id} was written by another version of eoctl"
            continue
        if any(index.inputs.get(n) != f for n, f in wanted.items()):
            continue
        damage = index.damage(files)
        if damage is None:
            return index, None
        why = why or f"the record index of run {run_id} is not as recorded ({damage}): it is never trusted"
    return None, why


@dataclass(frozen=True)
class IndexedRead:
    """Copies looked up in a recorded audit's record index (every record that audit read), and the
    source read only past the index's end: every copy, without a full scan."""

    base: RecordIndex
    plans: dict[str, list[PartitionPlan]]  # endpoint -> where its source is read from

    @property
    def records(self) -> int:
        return sum(s.records for s in self.base.segments)


def find_indexed_read(spark: Any, config: Config, probe: ArchiveProbe) -> tuple[IndexedRead | None, str | None]:
    """The record index a trace looks copies up in: the newest recorded audit's that covers every
    input unchanged and is as it was recorded (newest_intact; `spark`: None on DuckDB), with
    where each source is read past its end; else None, and why when an index was there but is
    not used (trace then reads a window, and says so)."""
    inputs = {n: ep for n, ep in config.endpoints.items() if ep.input is not None}
    if not inputs:
        return None, None
    base, why = newest_intact(spark, config, inputs)
    if base is None:  # why: an index that is there but damaged; None when no run kept one of these inputs
        return None, why
    plans, reason = plan_reads(config, inputs, base, probe)
    if plans is None:
        return None, f"the record index of run {base.run_id} is not used: {reason.removesuffix(': full scan')}"
    return IndexedRead(base, plans), None


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


def archive_condition(plans: list[PartitionPlan], quote) -> str:
    """Archive rows at or after their partition's start, and every row of partitions the index
    does not know, as SQL both engines read (`quote`: the engine's identifier quoting): the OR of
    archive_branches."""
    return "(" + " OR ".join(archive_branches(plans, quote)) + ")"


def _topic_literal(value: str) -> str:
    # Kafka topic names are [A-Za-z0-9._-]: a literal both engines read alike, no escaping
    if not _TOPIC_NAME.fullmatch(value):
        from eoctl.errors import SourceError

        raise SourceError(f"topic {value!r} in the record index is not a Kafka topic name")
    return f"'{value}'"


def below_end_condition(plans: list[PartitionPlan], quote) -> str:
    """Archive rows of a partition the index knows, below where it ends: what no archive file
    that arrived after the indexed run may hold (archive_change), as SQL both engines read."""
    topic, partition, offset = quote("topic"), quote("partition"), quote("offset")
    return "(" + (" OR ".join(f"({topic} = {_topic_literal(p.topic)} AND {partition} = {int(p.partition)} "
                              f"AND {offset} < {int(p.start)})" for p in plans) or "FALSE") + ")"


def archive_branches(plans: list[PartitionPlan], quote) -> list[str]:
    """The disjoint parts of archive_condition, each a conjunction led by comparisons of one column
    that Parquet decides from a row group's min/max, so the row groups of old files are skipped:
    per known topic, its rows at or past its lowest start (then each partition's own start); per
    known topic, its partitions around and between the known ones (a `NOT` of equalities would
    keep every row group holding several partitions); the topics the index does not know. DuckDB
    skips row groups only for a condition on one column, so it reads each part as a query of its
    own; Spark reads their OR."""
    topic, partition, offset = quote("topic"), quote("partition"), quote("offset")
    text = _topic_literal

    by_topic: dict[str, list[PartitionPlan]] = {}
    for p in plans:
        by_topic.setdefault(p.topic, []).append(p)
    branches = []
    for name, mine in sorted(by_topic.items()):
        starts = " OR ".join(f"({partition} = {int(p.partition)} AND {offset} >= {int(p.start)})" for p in mine)
        branches.append(f"({topic} = {text(name)} AND {offset} >= {min(int(p.start) for p in mine)} AND ({starts}))")
        parts = sorted({p.partition for p in mine})
        outside = [f"{partition} < {parts[0]}", f"{partition} > {parts[-1]}"]
        outside += [f"{partition} BETWEEN {low + 1} AND {high - 1}"
                    for low, high in zip(parts, parts[1:]) if high > low + 1]
        branches.append(f"({topic} = {text(name)} AND ({' OR '.join(outside)}))")
    branches.append(f"{topic} NOT IN ({', '.join(text(t) for t in sorted(by_topic))})")
    return branches


class ArchiveProbe(Protocol):
    """What an engine tells of a topic archive before a run continues an index of it."""

    def listing(self, path: str) -> dict[str, int]:
        """The archive's data files (path under `path` -> bytes), as its reader lists them: every
        file below it but the hidden ones (a name starting with `_` or `.`)."""

    def holds_below(self, source: TopicInput, files: list[str], plans: list[PartitionPlan]) -> bool:
        """Whether one of `files` (paths under the archive) holds a record below where its
        partition's index ends (below_end_condition)."""


def archive_listings(probe: ArchiveProbe, endpoints: dict[str, EndpointConfig]) -> dict[str, dict[str, int]]:
    """endpoint -> its archive's files now (RecordIndex.archives), of the archive inputs."""
    return {n: probe.listing(ep.input.archive) for n, ep in endpoints.items()
            if ep.input is not None and ep.input.archive}


def archive_change(base: RecordIndex, name: str, source: TopicInput, now: dict[str, int],
                   plans: list[PartitionPlan], probe: ArchiveProbe) -> str | None:
    """Why `base` no longer describes an endpoint's archive, in words; None when it still does:
    every file it listed is there with its bytes, and no file added since holds a record below
    where the index ends (a late file: its records would be skipped, as if never sent)."""
    listed = (base.archives or {}).get(name)
    if listed is None:
        return f"the record index of run {base.run_id} does not list the files of {name}'s archive"
    for path, size in sorted(listed.items()):
        found = now.get(path)
        if found is None:
            return f"archive file {path} of {name} is gone since run {base.run_id}"
        if found != size:
            return f"archive file {path} of {name} holds {found:,} bytes where run {base.run_id} listed {size:,}"
    added = sorted(set(now) - set(listed))
    if added and plans and probe.holds_below(source, added, plans):
        shown = ", ".join(added[:3]) + (f" and {len(added) - 3} more" if len(added) > 3 else "")
        return (f"archive file(s) {shown} of {name}, added since run {base.run_id}, hold records below where "
                "its index ends (late files)")
    return None


def plan_reads(config: Config, endpoints: dict[str, EndpointConfig], base: RecordIndex, probe: ArchiveProbe,
               listings: dict[str, dict[str, int]] | None = None,
               ) -> tuple[dict[str, list[PartitionPlan]] | None, str | None]:
    """Per endpoint, where the source is read from when continuing from `base`; None (with the
    reason: a full scan) when a live partition ends below what the index read, or an archive is
    no longer as the index listed it (archive_change). `listings`: the archives' files, listed
    already (archive_listings)."""
    plans: dict[str, list[PartitionPlan]] = {}
    listings = listings if listings is not None else archive_listings(probe, endpoints)
    for name, ep in endpoints.items():
        if ep.input is None:
            continue
        ends = base.ends.get(name, {})
        if ep.input.kafka:
            plan, reason = kafka_plan(config, ep.input, ends)
            if plan is None:
                return None, reason
            plans[name] = plan
        else:
            plans[name] = archive_plan(ends)
            changed = archive_change(base, name, ep.input, listings.get(name, {}), plans[name], probe)
            if changed:
                return None, f"{changed}: full scan"
    return plans, None


def index_ends(plans: dict[str, list[PartitionPlan]], stats: list) -> dict[str, dict[str, dict[int, int]]]:
    """endpoint -> topic -> partition -> the offset the next run reads from: past what this run
    read (`stats`: (endpoint, topic, partition, end, records, low) per partition read), else where
    the base had read to."""
    ends: dict[str, dict[str, dict[int, int]]] = {}
    for name, partition_plans in plans.items():
        for p in partition_plans:
            if p.start >= 0:
                ends.setdefault(name, {}).setdefault(p.topic, {})[p.partition] = p.start
    for endpoint, topic, partition, end, _n, _low in stats:
        parts = ends.setdefault(endpoint, {}).setdefault(topic, {})
        parts[partition] = max(parts.get(partition, 0), end)
    return ends


def live_lows(base: RecordIndex | None, plans: dict[str, list[PartitionPlan]], stats: list,
              live: set[str]) -> dict[str, dict[str, dict[int, int]]]:
    """endpoint -> topic -> partition -> the lowest offset the index holds once this run is kept,
    for the `live` (Kafka) inputs: the recorded one, raised to the log start where retention took
    the rows below it, or the lowest this run read."""
    lows: dict[str, dict[str, dict[int, int]]] = {}
    for name, partition_plans in plans.items():
        known = (base.lows or {}).get(name, {}) if base is not None else {}
        for p in partition_plans:
            low = known.get(p.topic, {}).get(p.partition)
            if name in live and low is not None:
                lows.setdefault(name, {}).setdefault(p.topic, {})[p.partition] = max(low, p.low)
    for endpoint, topic, partition, _end, _n, low in stats:
        if endpoint in live:
            parts = lows.setdefault(endpoint, {}).setdefault(topic, {})
            parts[partition] = min(parts.get(partition, low), low)
    return lows


def whole_index_count(base: RecordIndex, plans: dict[str, list[PartitionPlan]]) -> int | None:
    """How many index rows a continuing run takes, from the segments' counts alone: when it takes
    every row (each indexed partition is planned, from its indexed end, with no log start above
    the lowest offset the index holds, and the index holds no endpoint the run does not audit);
    else None (count them)."""
    planned = {(n, p.topic, p.partition): p for n, partition_plans in plans.items() for p in partition_plans}
    for name, topics in base.ends.items():
        for topic, parts in topics.items():
            for partition, end in parts.items():
                p = planned.get((name, topic, partition))
                low = (base.lows or {}).get(name, {}).get(topic, {}).get(partition)
                if p is None or p.start < end or (p.low > 0 and (low is None or p.low > low)):
                    return None
    if set(base.inputs) - set(plans):
        return None
    return sum(s.records for s in base.segments)


def in_flight_floor(plans: dict[str, list[PartitionPlan]],
                    committed: dict[str, dict[str, dict[int, int]]]) -> int | None:
    """The lowest committed offset of the partitions the index is read for: no index row below it
    is in flight, and a comparison of the offset alone is one Parquet decides from a row group's
    statistics, so the in-flight rows of the index are read without its processed row groups.
    None when a partition has no committed offset (all its rows are in flight)."""
    floors = [committed.get(name, {}).get(p.topic, {}).get(p.partition)
              for name, partition_plans in plans.items() for p in partition_plans]
    return None if any(f is None for f in floors) else min(floors, default=None)


def processed_bounds(base: RecordIndex, plans: dict[str, list[PartitionPlan]],
                     committed: dict[str, dict[str, dict[int, int]]]) -> tuple[tuple[str, str, int, int], ...] | None:
    """Per partition the index is read for, (endpoint, topic, partition, offset): its indexed
    records below the offset were processed for the recorded run `base` (below its committed
    offset then, and indexed), and are still (eoctl.expr.incremental: EO503's counts continue
    from them). None when the recorded run kept no committed offsets, or one moved back or is
    gone (`committed`: now): records it had processed may not be any more."""
    if base.committed is None:
        return None
    out = []
    for name, partition_plans in sorted(plans.items()):
        for p in partition_plans:
            then = base.committed.get(name, {}).get(p.topic, {}).get(p.partition)
            if then is None or p.start <= 0:  # nothing of it processed then, or nothing indexed
                continue
            now = committed.get(name, {}).get(p.topic, {}).get(p.partition)
            if now is None or now < then:
                return None
            out.append((name, p.topic, p.partition, min(then, p.start)))
    return tuple(out)


def drops(base: RecordIndex, plans: dict[str, list[PartitionPlan]]) -> bool:
    """Whether retention took indexed records since `base`: a live partition's log start is now
    above the lowest offset the index holds (a partition without one holds no indexed row)."""
    for name, partition_plans in plans.items():
        for p in partition_plans:
            if p.low <= 0 or p.start < 0:
                continue
            low = (base.lows or {}).get(name, {}).get(p.topic, {}).get(p.partition)
            if low is not None and p.low > low:
                return True
    return False


def scan_summary(base: RecordIndex | None, fallback: str | None, since_last: bool, total: int,
                 fresh: int, config: Config | None = None, keeps: bool = False) -> dict[str, object]:
    """How the records were read: all from the source, or continuing from a recorded run's index.
    `keeps`: this run keeps a record index (said when there was none to continue from)."""
    if base is not None:
        return {"mode": "incremental", "base_run": base.run_id, "new_records": fresh,
                "indexed_records": total - fresh}
    out: dict[str, object] = {"mode": "full", "new_records": total, "indexed_records": 0}
    if since_last:
        out["reason"] = fallback or (no_base_reason(config, keeps) if config is not None else NO_BASE)
    return out


def no_base_reason(config: Config, keeps: bool) -> str:
    """Why there was no run to continue from, and how the next --since-last will have one: runs
    the findings history lists kept no index unless they were recorded `--since-last` runs."""
    from eoctl.history import count_runs, indexed_runs

    recorded, indexed = count_runs(config), len(indexed_runs(config))
    if not recorded:
        why = "the findings history has no run yet"
    elif not indexed:
        why = (f"the {recorded} recorded run(s) kept no record index: only a recorded `eoctl audit --since-last` "
               "keeps one")
    else:
        why = "no recorded index covers these inputs as configured now, or its files are gone"
    then = ("this run keeps one, and the next --since-last continues from it" if keeps else
            "a recorded run (without --no-record) keeps one")
    return f"{NO_BASE} ({why}; {then})"


# ------------------------------------------------------------------------- index lifecycle


def run_folder(config: Config, run_id: str) -> str:
    """Where a run's own part of the index lives: its segment (`records`) and a merged segment
    (`merged`)."""
    return f"{records_root(config)}/{run_id}"


def state_files(folder: str, states: dict[str, tuple[int, int]]) -> dict[str, StateFile]:
    """The states a run wrote (name -> (rows, bytes)) as its index names them, in its folder."""
    return {name: StateFile(f"{folder}/state/{name}", rows, size) for name, (rows, size) in states.items()}


def publish(spark: Any, config: Config, run_id: str, partial: str) -> str:
    """Rename a complete partial run folder into place; only then can a history row name it.
    `spark`: the Spark engine's session, None on DuckDB (eoctl.engine.files)."""
    from eoctl.engine.files import index_files

    final = run_folder(config, run_id)
    files = index_files(spark)
    files.mkdirs(partial)  # a run that read no record and kept no state has an empty folder
    if not files.rename(partial, final):
        from eoctl.errors import SourceError

        raise SourceError(f"the record index {partial} could not be renamed to {final}")
    return final


def prune(spark: Any, config: Config) -> list[str]:
    """Delete every run folder the newest recorded indexes do not read, and partial folders of
    killed audits. Returns the paths deleted."""
    from eoctl.engine.files import index_files
    from eoctl.history import indexed_runs

    root = records_root(config)
    files = index_files(spark)
    entries = files.children(root)
    if not entries:
        return []
    kept: set[str] = set()
    indexes = 0
    for run_id, text in indexed_runs(config):
        index = RecordIndex.from_json(run_id, text)
        if index is not None and all(files.exists(path) for path in index.paths):
            # a segment lives in the folder of the run that wrote it: keep every folder it names
            kept |= {path[len(root):].strip("/").split("/", 1)[0] for path in index.paths
                     if path.startswith(root + "/")}
            indexes += 1
            if indexes == _KEEP:
                break
    cutoff = (dt.datetime.now(dt.timezone.utc) - _PARTIAL_MAX_AGE).timestamp() * 1000
    deleted = []
    for name, mtime in entries:
        if name in kept or (name.startswith(_PARTIAL) and mtime > cutoff):
            continue  # a partial folder younger than a day may be a running audit's
        files.delete(f"{root}/{name}")
        deleted.append(f"{root}/{name}")
    return deleted


def record(spark: Any, config: Config, report: AuditReport) -> str:
    """Record an audit run in the findings history, with its record index: the run's folder is
    dropped when the run cannot be recorded, and folders no index reads any more once it is."""
    from eoctl.history import record as record_run

    try:
        run_id = record_run(config, report)
    except BaseException:
        if report.index is not None:
            discard(spark, run_folder(config, report.index.run_id))
        raise
    if report.index is not None:
        prune(spark, config)
    return run_id


def discard(spark: Any, path: str) -> None:
    from eoctl.engine.files import index_files

    index_files(spark).delete(path)

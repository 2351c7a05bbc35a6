"""The audit's checks over a few given rows: how `eoctl trace` tells which findings concern a message.

trace gathers every row that can bear on a message: its copies, the other attempts that answered
the incoming message it answers, the records sharing its (producer, sequence), the store rows and
sink rows naming it or its tokens, the blobs it publishes or its processing prepared. A
ScopedContext gives the checks those rows in place of whole topics, tables, sinks and blob
prefixes, so that the message's findings come from the catalog's own definitions, never from a
second set of rules. Only the message-scoped codes run (CodeInfo.names_message); a finding row is
the message's when its evidence names it.

The rows are few (a message has a handful of copies), so nothing is cached or counted ahead, and
all the checks' evidence comes back in one Spark job.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from eoctl.checks.context import RECORD_DDL, AuditContext, AuditOptions
from eoctl.config.model import Config, SinkConfig
from eoctl.report.findings import CATALOG

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


class ScopedContext(AuditContext):
    """An AuditContext whose records, store tables, sinks and blob listings are given frames.

    `records`: RECORD_COLUMNS without `committed` and `processed` (taken from `committed`, as the
    audit does); `tables`: (endpoint, tokens|outbox|intents) -> the endpoint's rows with canonical
    columns, for the tables that exist; `sinks`: (endpoint, sink name) -> rows; `blobs`: endpoint ->
    (name, size, modified, actual_sha256) of the blobs looked at under its prefix."""

    def __init__(self, spark: SparkSession, config: Config, options: AuditOptions, *, records: DataFrame,
                 committed: dict[str, dict[str, dict[int, int]]], tables: dict[tuple[str, str], DataFrame],
                 sinks: dict[tuple[str, str], DataFrame], blobs: dict[str, DataFrame]) -> None:
        super().__init__(spark, config, options)
        # the base class's cached properties, given (an instance attribute wins over them)
        self.committed = committed
        self._tables = tables
        self.fresh = self.with_processed(records)
        self._sinks = sinks
        self._blobs = blobs

    def persist(self, df: DataFrame) -> DataFrame:
        return df  # a few rows: recomputing is cheaper than caching

    def keys(self, df: DataFrame, probe: bool = False) -> DataFrame:
        return df  # no count ahead: every frame here is small

    def sink(self, endpoint: str, sink: SinkConfig) -> DataFrame:
        return self._sinks[(endpoint, sink.name)]

    def blob_listing(self, name: str, with_hash: bool, list_all) -> DataFrame:
        df = self._blobs[name]
        return df if with_hash else df.drop("actual_sha256")


#: the columns of ScopedContext's `records`: the audit's record columns, less those it derives
SCOPED_RECORDS = ", ".join(c for c in RECORD_DDL.split(", ") if c.split()[0] not in ("committed", "processed"))
SCOPED_RECORD_COLUMNS = tuple(c.split()[0] for c in SCOPED_RECORDS.split(", "))

#: the codes a ScopedContext runs: those whose evidence names a message
MESSAGE_CODES = tuple(code for code, info in CATALOG.items() if info.message_scoped)


def scoped_findings(ctx: ScopedContext, codes: tuple[str, ...] = MESSAGE_CODES) -> list[dict[str, Any]]:
    """Every evidence row the checks `codes` find in the context's rows, in catalog order:
    {code, endpoint, where, evidence}. One Spark job brings them all back."""
    import json
    from functools import reduce

    from pyspark.sql import functions as F

    from eoctl.checks import all_checks

    checks = all_checks()
    parts = []
    for code in codes:
        for found, endpoint, where, df in checks[code](ctx):
            row = F.to_json(F.struct(*[F.col(f"`{c}`") for c in df.columns]))
            parts.append(df.select(F.lit(len(parts)).alias("part"), F.lit(found).alias("code"),
                                   F.lit(endpoint).alias("endpoint"), F.lit(where).alias("where"), row.alias("row")))
    if not parts:
        return []
    rows = reduce(lambda a, b: a.unionByName(b), parts).collect()  # the findings of a few rows
    rows = sorted(rows, key=lambda r: (r["part"], r["row"]))
    return [{"code": r["code"], "endpoint": r["endpoint"], "where": r["where"], "evidence": json.loads(r["row"])}
            for r in rows]

"""What EO501 and EO502 read of a sink with a `watermark_column` in an incremental audit
(`audit --since-last`, eoctl.expr.incremental), written once for both engines.

A recorded run keeps, per such sink, three small states named after a digest of the sink's
configuration (`sink_<digest>_...`: another table, other columns or another watermark is another
sink, read whole once):
- `mark`: the highest watermark the sink has held (as an integer, see `ordinal`; the higher of the
  kept mark and the new rows'), taken before any check;
- `applied_twice`: EO501's message ids with more than one row;
- `differing_keys`: EO502's keys whose rows hold more than one value.

The next run's *new rows* are those at or above the mark, or without a watermark. EO501 then
reads every row of the message ids the new rows or `applied_twice` hold; EO502 every row of the
keys the new rows or `differing_keys` hold (views `sink_<i>_by_message`, `sink_<i>_by_key`). The
ids and keys are kept first (`sink_<i>_touched`), then the rows of either, in one scan of the sink
(`sink_<i>_touched_rows`). The checks are the full audit's, over those rows.

Why the findings are the full audit's: each view holds every row of each group it holds, so the
evidence of a group it holds is the full audit's. A group it does not hold had no new row, so
every row of it was there when the recorded run read the sink (every write sets the watermark
above all earlier ones, and the mark was taken before the run read anything): then it had one
row, or one value, or it would be in the state. Deleting rows only shrinks groups, and an update
is a write. The states of this run are the same aggregates over the same views: by induction they
hold every group of their kind in the whole sink.

EO202 reads the rows of the messages in flight without a held token (UNHELD, touched).

A sink that must hold every message (EO503's) keeps three more states:
- `no_row`: the messages processed with no row in it (EO503's candidates, pending or not), whose
  processed records the run carries (carried_records);
- `edge`: the message ids of the rows at or above the mark, or without a watermark, when the mark
  was taken: rows the next run reads as new, whose deletion it could not see otherwise;
- `below`: how many rows were below the mark then.
EO503 reads the rows of the message ids of its records (eoctl.expr.incremental: the messages
processed since, `no_row` and `edge`). A row deleted or rewritten below the mark lowers the count
below it (`below_now`): the next run then reads every record for EO503, as a full audit does.
"""

from __future__ import annotations

import datetime
import hashlib
import json
from collections.abc import Iterator
from typing import TYPE_CHECKING

import ibis
import ibis.expr.datatypes as dt

from eoctl.expr import sinks
from eoctl.expr.functions import Dialect, epoch_micros, key_hash
from eoctl.expr.inputs import state_table

if TYPE_CHECKING:
    import ibis.expr.types as ir

    from eoctl.config.model import SinkConfig
    from eoctl.expr.inputs import Scope

MARK_SCHEMA = {"mark": "int64"}
APPLIED_TWICE_SCHEMA = {"source_message_id": "string"}


def digest(endpoint: str, sink: SinkConfig) -> str:
    """A digest of what the sink's states depend on: where its rows are and which columns mean what."""
    fields = sink.model_dump(mode="json", exclude={"every_message", "num_partitions", "partition_column"})
    text = json.dumps({"endpoint": endpoint, **fields}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def _state(endpoint: str, sink: SinkConfig, kind: str) -> str:
    return f"sink_{digest(endpoint, sink)}_{kind}"


def mark_state(endpoint: str, sink: SinkConfig) -> str:
    return _state(endpoint, sink, "mark")


def applied_twice_state(endpoint: str, sink: SinkConfig) -> str:
    return _state(endpoint, sink, "applied_twice")


def differing_keys_state(endpoint: str, sink: SinkConfig) -> str:
    return _state(endpoint, sink, "differing_keys")


def state_names(endpoint: str, sink: SinkConfig) -> list[str]:
    names = [mark_state(endpoint, sink), applied_twice_state(endpoint, sink)]
    return [*names, differing_keys_state(endpoint, sink)] if sink.key_columns else names


ROWS_SCHEMA = {"rows": "int64"}
IDS_SCHEMA = {"message_id": "string"}


def effect_state_names(endpoint: str, sink: SinkConfig) -> list[str]:
    """The states EO503 reads a sink that must hold every message by: the mark, `no_row`,
    `edge` and `below`."""
    return [mark_state(endpoint, sink), without_state(endpoint, sink), edge_state(endpoint, sink),
            below_state(endpoint, sink)]


def without_state(endpoint: str, sink: SinkConfig) -> str:
    return _state(endpoint, sink, "no_row")


def edge_state(endpoint: str, sink: SinkConfig) -> str:
    return _state(endpoint, sink, "edge")


def below_state(endpoint: str, sink: SinkConfig) -> str:
    return _state(endpoint, sink, "below")


def edge_view(scope: Scope, endpoint: str, sink: SinkConfig) -> str:
    return f"{scope.sink_view(endpoint, sink)}_edge"


def count_view(scope: Scope, endpoint: str, sink: SinkConfig) -> str:
    return f"{scope.sink_view(endpoint, sink)}_rows"


def edge(scope: Scope, endpoint: str, sink: SinkConfig, dialect: Dialect, kept: int | None) -> ir.Table:
    """The `edge` state: the message ids of the rows at or above the mark kept now (mark_view), or
    without a watermark, one per row (of the new rows since a `kept` mark: Parquet skips the
    others). Kept with the mark, before any check reads the sink."""
    rows = new_rows(scope, endpoint, sink, dialect, kept)
    mark = ibis.table(ibis.schema(MARK_SCHEMA), name=mark_view(scope, endpoint, sink))
    w = rows[sink.watermark_column]
    at = rows.filter(w.isnull() | (ordinal(w, dialect) >= mark.mark.max().as_scalar()))
    return at.select(message_id=at[sink.message_id_column].cast("string"))


def row_count(scope: Scope, endpoint: str, sink: SinkConfig) -> ir.Table:
    """The sink's rows now, counted (one row), kept with the mark and `edge`."""
    rows = scope.whole_sink(endpoint, sink)
    return rows.aggregate(rows=rows.count().cast("int64"))


def below(scope: Scope, endpoint: str, sink: SinkConfig) -> ir.Table:
    """The `below` state: the rows below the mark when it was kept (the count less `edge`'s rows)."""
    total = ibis.table(ibis.schema(ROWS_SCHEMA), name=count_view(scope, endpoint, sink))
    at = ibis.table(ibis.schema(IDS_SCHEMA), name=edge_view(scope, endpoint, sink))
    return total.select(rows=(total.rows - at.count().as_scalar()).cast("int64"))


def below_now(scope: Scope, endpoint: str, sink: SinkConfig, dialect: Dialect, mark: int | None) -> ir.Table:
    """One row: `now`, the rows below the recorded run's `mark` now (none when it had none: the
    sink was empty), and `then`, as many as it counted (its `below` state). They differ when a row
    below the mark was deleted or rewritten (or written below it)."""
    kept = state_table(below_state(endpoint, sink), ROWS_SCHEMA)
    then = kept.aggregate(then=kept.rows.max())
    if mark is None:
        return then.mutate(now=ibis.literal(0, "int64"))
    rows = scope.whole_sink(endpoint, sink)
    w = rows[sink.watermark_column]
    old = rows.filter(w.notnull(), ordinal(w, dialect) < mark)
    return old.aggregate(now=old.count().cast("int64")).cross_join(then)


def mark_view(scope: Scope, endpoint: str, sink: SinkConfig) -> str:
    """The kept table of the sink's highest watermark now (one row)."""
    return f"{scope.sink_view(endpoint, sink)}_mark"


def by_message_view(scope: Scope, endpoint: str, sink: SinkConfig) -> str:
    return f"{scope.sink_view(endpoint, sink)}_by_message"


def by_key_view(scope: Scope, endpoint: str, sink: SinkConfig) -> str:
    return f"{scope.sink_view(endpoint, sink)}_by_key"


def watermark_type(scope: Scope, endpoint: str, sink: SinkConfig) -> dt.DataType:
    return scope.sink_schemas[(endpoint, sink.name)][sink.watermark_column]


def ordered(kind: dt.DataType) -> bool:
    """Whether a watermark of this type can be kept as a mark: an integer or a time."""
    return (kind.is_integer() or kind.is_timestamp() or kind.is_date()
            or (kind.is_decimal() and kind.scale == 0 and (kind.precision or 38) <= 18))


def watermarked(scope: Scope) -> Iterator[tuple[str, SinkConfig]]:
    """The judged endpoints' sinks with a watermark column of a type a mark can keep."""
    for name, ep in scope.endpoints.items():
        for sink in ep.sinks:
            if sink.watermark_column and (name, sink.name) in scope.sink_schemas \
                    and ordered(watermark_type(scope, name, sink)):
                yield name, sink


def ordinal(value: ir.Value, dialect: Dialect) -> ir.IntegerValue:
    """A watermark as an integer in its order, alike on both engines: a time as microseconds
    since the epoch (one without a zone taken as UTC), an integer as itself. (Not a float: Ibis
    compiles a float column for Spark only with its PySpark backend loaded.)"""
    if value.type().is_date():
        value = value.cast("timestamp")
    if value.type().is_timestamp():
        return epoch_micros(value, dialect)
    return value.cast("int64")


def mark(scope: Scope, endpoint: str, sink: SinkConfig, dialect: Dialect, kept: int | None = None) -> ir.Table:
    """The highest watermark the sink has held (its `mark` state for the next run): the highest
    of its rows now, or, continuing from a `kept` mark, the higher of it and the new rows'
    (new_rows: Parquet reads only their row groups; on Spark the whole sink's watermarks took
    about 1 s at 10M rows). A mark never goes down: rows deleted since do not lower it, and every
    later write sets its watermark above theirs."""
    rows = new_rows(scope, endpoint, sink, dialect, kept)
    highest = ordinal(rows[sink.watermark_column], dialect).max()
    return rows.aggregate(mark=highest if kept is None else highest.coalesce(ibis.literal(kept, "int64")))


def key_schema(scope: Scope, endpoint: str, sink: SinkConfig) -> dict[str, dt.DataType]:
    columns = scope.sink_schemas[(endpoint, sink.name)]
    return {k: columns[k] for k in sink.key_columns}


def new_rows(scope: Scope, endpoint: str, sink: SinkConfig, dialect: Dialect, mark: int | None) -> ir.Table:
    """The rows written since the recorded run read the sink: at or above its `mark` (the integer
    the run kept, read beforehand), or without a watermark; every row when the mark is None (the
    sink was empty then)."""
    rows = scope.sink(endpoint, sink)
    return rows if mark is None else at_or_above(rows, sink.watermark_column, mark, dialect)


def at_or_above(rows: ir.Table, column: str, mark: int, dialect: Dialect) -> ir.Table:
    """The rows whose watermark `column` is at or above `mark` (`ordinal`), or NULL. The column is
    also compared with the mark as a literal of its own type: a comparison Parquet decides from
    row groups' statistics, so the old rows' groups are skipped (`ordinal`'s alone read every
    row's watermark: 0.27 s of 10M rows against 0.02 s); `ordinal`'s decides. Two conditions,
    not one OR: DuckDB pushes only a condition on the column alone into the scan."""
    w = rows[column]
    return rows.filter(w.isnull() | (w >= _watermark_literal(mark, w.type())), w.isnull() | (ordinal(w, dialect) >= mark))


def _watermark_literal(mark: int, kind: dt.DataType) -> ir.Value:
    """A watermark of type `kind` no later than every one whose `ordinal` is `mark` or more (a
    time: `mark` microseconds after the epoch, a wall time in UTC for a time without a zone, one
    microsecond early: Ibis writes DuckDB's seconds as a float, which may round up)."""
    if kind.is_date():
        return ibis.literal((_EPOCH + datetime.timedelta(microseconds=mark)).date(), type=kind)
    if kind.is_timestamp():
        instant = _EPOCH + datetime.timedelta(microseconds=mark - 1)
        return ibis.literal(instant if kind.timezone is not None else instant.replace(tzinfo=None), type=kind)
    return ibis.literal(mark, type=kind)


_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)


def touched_view(scope: Scope, endpoint: str, sink: SinkConfig) -> str:
    return f"{scope.sink_view(endpoint, sink)}_touched"


def touched(scope: Scope, endpoint: str, sink: SinkConfig, new: ir.Table, messages: ir.Table) -> ir.Table:
    """The message ids and keys whose rows EO501, EO502 and EO202 read, as one table (`_mid`, the
    key columns as `_k0`, `_k1`, ..., and flags `_message` and `_key`: what of the row is touched):
    the `new` rows' ids and keys, `applied_twice`'s ids, `messages`' ids (`message_id`: those EO202
    may find lost, whose rows it looks for) and `differing_keys`'s keys. Kept as a table
    before `touched_rows` reads it, so the engine knows how few they are: as a subquery DuckDB
    took the ids for the larger side and built its join of the sink's every row (19 of a
    100M-record run's 81 s, spilling). One table, not one for the ids and one for the keys: each
    read the new rows (on Spark a kept table costs a second or more)."""
    types = key_schema(scope, endpoint, sink)

    def shaped(t: ir.Table, mid: ir.Value | None, keys: ir.Table | None, message: bool, key: bool) -> ir.Table:
        return t.select(_mid=mid if mid is not None else ibis.null("string"),
                        **{f"_k{i}": keys[k] if keys is not None else ibis.null(types[k])
                           for i, k in enumerate(sink.key_columns)},
                        _message=ibis.literal(message), _key=ibis.literal(key))

    twice = state_table(applied_twice_state(endpoint, sink), APPLIED_TWICE_SCHEMA)
    parts = [shaped(new, new[sink.message_id_column].cast("string"), new, True, True),
             shaped(twice, twice.source_message_id, None, True, False),
             shaped(messages, messages.message_id, None, True, False)]
    if sink.key_columns:
        differing = state_table(differing_keys_state(endpoint, sink), types)
        parts.append(shaped(differing, None, differing, False, True))
    return ibis.union(*parts)


def touched_rows_view(scope: Scope, endpoint: str, sink: SinkConfig) -> str:
    return f"{scope.sink_view(endpoint, sink)}_touched_rows"


def touched_rows(scope: Scope, endpoint: str, sink: SinkConfig, dialect: Dialect) -> ir.Table:
    """Every row of the touched message ids and of the touched keys (`touched`, kept), in one scan
    of the sink: each alone a scan of 10M rows' ids or keys (0.4 s and 0.2 s on DuckDB; 0.5 s
    together). A key is met by its hash (key_hash: null-safe, and one number for several
    columns), so a collision may take a row more, which `by_key` drops."""
    rows = scope.sink(endpoint, sink)
    touched = rows[sink.message_id_column].cast("string").isin(_touched_messages(scope, endpoint, sink).source_message_id)
    if sink.key_columns:
        keys = _touched_keys(scope, endpoint, sink)
        touched = touched | key_hash(rows, sink.key_columns, dialect).isin(key_hash(keys, sink.key_columns, dialect))
    return rows.filter(touched)


def by_message(scope: Scope, endpoint: str, sink: SinkConfig) -> ir.Table:
    """EO501's and EO202's rows: every row of the touched message ids (of `touched_rows`)."""
    rows = _touched_rows(scope, endpoint, sink)
    ids = _touched_messages(scope, endpoint, sink)
    return rows.filter(rows[sink.message_id_column].cast("string").isin(ids.source_message_id))


def by_key(scope: Scope, endpoint: str, sink: SinkConfig) -> ir.Table:
    """EO502's rows: every row of the touched keys (of `touched_rows`; null-safe: a NULL key is a
    group of its own, as in the check)."""
    rows = _touched_rows(scope, endpoint, sink)
    keys = _touched_keys(scope, endpoint, sink)
    return rows.semi_join(keys, [rows[k].identical_to(keys[k]) for k in sink.key_columns])


def _touched(scope: Scope, endpoint: str, sink: SinkConfig) -> ir.Table:
    keys = key_schema(scope, endpoint, sink)
    schema = {"_mid": "string", **{f"_k{i}": keys[k] for i, k in enumerate(sink.key_columns)},
              "_message": "boolean", "_key": "boolean"}
    return ibis.table(ibis.schema(schema), name=touched_view(scope, endpoint, sink))


def _touched_messages(scope: Scope, endpoint: str, sink: SinkConfig) -> ir.Table:
    t = _touched(scope, endpoint, sink)
    return t.filter(t._message).select(source_message_id=t._mid)


def _touched_keys(scope: Scope, endpoint: str, sink: SinkConfig) -> ir.Table:
    """The touched keys under the sink's own column names (a key column may be named as the
    message id column is: `touched` names them apart)."""
    t = _touched(scope, endpoint, sink)
    return t.filter(t._key).select(**{k: t[f"_k{i}"] for i, k in enumerate(sink.key_columns)})


def _touched_rows(scope: Scope, endpoint: str, sink: SinkConfig) -> ir.Table:
    return ibis.table(scope.sink_schemas[(endpoint, sink.name)], name=touched_rows_view(scope, endpoint, sink))


def applied_twice(scope: Scope, endpoint: str, sink: SinkConfig) -> ir.Table:
    """The `applied_twice` state: EO501's message ids over `scope`'s rows of the sink."""
    return sinks.messages_applied_twice(scope)[sinks.applied_twice_view(scope, endpoint, sink)].select(
        "source_message_id")

"""What Ibis has no one form for on both engines, written once per engine here and nowhere else.

Each helper takes the dialect the expression is compiled for; the functions it names are the
engine's own (Ibis "builtin" UDFs compile to a plain call of that name).
"""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING

import ibis
import ibis.expr.datatypes as dt

if TYPE_CHECKING:
    from collections.abc import Sequence

    import ibis.expr.types as ir


class Dialect(str, enum.Enum):
    duckdb = "duckdb"
    spark = "pyspark"  # sqlglot's name for Spark SQL as Ibis writes it


def compile_sql(expr: ir.Expr, dialect: Dialect) -> str:
    """The SQL of `expr` for `dialect`; unbound tables become names the engine has as views
    (what ibis.to_sql writes, through the one compiler the run needs)."""
    compiler = sql_compiler(dialect)
    queries = compiler.to_sqlglot(expr.unbind())
    queries = queries if isinstance(queries, list) else [queries]
    return ";\n".join(q.sql(dialect=compiler.dialect, pretty=True) for q in queries)


_COMPILERS = "ibis.backends.sql.compilers"


def sql_compiler(dialect: Dialect):
    """Ibis's compiler for `dialect`. The package of compilers imports all twenty of them when it
    is imported (0.14 s, a tenth of a DuckDB gc plan); the one needed is imported alone, under a
    stand-in package that runs the real package's code the first time anything else is asked of
    it (so ibis.to_sql and the other compilers still work)."""
    import importlib
    import importlib.util
    import sys

    name = f"{_COMPILERS}.{dialect.value}"
    if name not in sys.modules and _COMPILERS not in sys.modules:
        spec = importlib.util.find_spec(_COMPILERS)
        if spec is not None and spec.loader is not None and spec.submodule_search_locations:
            package = importlib.util.module_from_spec(spec)  # __path__ set, its code not run

            def complete(attribute: str):
                del package.__dict__["__getattr__"]
                spec.loader.exec_module(package)  # the real package, in the same module object
                return getattr(package, attribute)

            package.__getattr__ = complete
            sys.modules[_COMPILERS] = package
    return importlib.import_module(name).compiler


@ibis.udf.scalar.builtin(name="try")
def _duckdb_try(value: dt.string) -> dt.string:
    """DuckDB: NULL where the expression fails (decode of invalid UTF-8)."""


@ibis.udf.scalar.builtin(name="decode")
def _duckdb_decode(value: dt.binary) -> dt.string:
    """DuckDB: bytes as UTF-8 text; an error for invalid UTF-8."""


@ibis.udf.scalar.builtin(name="is_valid_utf8")
def _spark_is_valid_utf8(value: dt.binary) -> dt.boolean:
    """Spark: whether the bytes are valid UTF-8."""


def utf8_text(value: ir.BinaryValue, dialect: Dialect) -> ir.StringValue:
    """Bytes as text when they are valid UTF-8, else NULL: the same on both engines (a DuckDB
    string cannot hold invalid UTF-8; Spark's can, and would group and show it)."""
    if dialect is Dialect.duckdb:
        return _duckdb_try(_duckdb_decode(value))
    return ibis.ifelse(_spark_is_valid_utf8(value), value.cast("string"), ibis.null("string"))


#: eo-blobs: a JSON list of {uri, sha256} (DESIGN.md §2)
BLOB_REFS = dt.Array(dt.Struct({"uri": dt.string, "sha256": dt.string}))


@ibis.udf.scalar.builtin(name="from_json")
def _spark_from_json(value: dt.string, schema: dt.string) -> BLOB_REFS:
    """Spark: the JSON text parsed as `schema`, NULL when it is not of that shape."""


def _json_list(text: ir.StringValue, of: dt.Array, spark_parse, spark_schema: str, dialect: Dialect) -> ir.ArrayValue:
    """JSON text as a list of type `of`, NULL when it is not one, the same on both engines
    (`spark_parse`: Spark's from_json declared to return `of`)."""
    if dialect is Dialect.duckdb:
        return text.try_cast("json").try_cast(of)
    # Spark's from_json reads a lone object as a list of one: only text that is a JSON list is one
    return text.lstrip().startswith("[").ifelse(spark_parse(text, spark_schema), ibis.null(of))


def blob_refs(text: ir.StringValue, dialect: Dialect) -> ir.ArrayValue:
    """eo-blobs text as a list of {uri, sha256}, NULL when it is not one."""
    return _json_list(text, BLOB_REFS, _spark_from_json, "array<struct<uri: string, sha256: string>>", dialect)


def json_refs_valid(text: ir.StringValue, dialect: Dialect) -> ir.BooleanValue:
    return blob_refs(text, dialect).notnull()


#: eo_outbox.outgoing: the messages an entry holds to send (DESIGN.md §2)
OUTGOING = dt.Array(dt.Struct({"message_id": dt.string, "token_id": dt.string, "topic": dt.string, "key": dt.string,
                               "headers": dt.Map(dt.string, dt.string)}))


@ibis.udf.scalar.builtin(name="from_json")
def _spark_outgoing(value: dt.string, schema: dt.string) -> OUTGOING:
    """Spark: the JSON text parsed as `schema`, NULL when it is not of that shape."""


def outgoing_messages(text: ir.StringValue, dialect: Dialect) -> ir.ArrayValue:
    """An outbox entry's `outgoing` text as a list of messages, NULL when it is not one."""
    return _json_list(text, OUTGOING, _spark_outgoing, "array<struct<message_id: string, token_id: string, "
                      "topic: string, key: string, headers: map<string, string>>>", dialect)


def to_json(value: ir.StructValue, dialect: Dialect) -> ir.StringValue:
    """A struct as JSON text, null fields kept, the same on both engines for text, integers,
    booleans and nulls (times and floats are written in each engine's own format). Spark keeps
    null fields only with `spark.sql.jsonGenerator.ignoreNullFields=false` (SPARK_SQL_CONF, set by
    the Spark engine for the run): options given in SQL must be a `map(...)` call, which sqlglot
    rewrites as map_from_arrays."""
    fn = ibis.udf.scalar.builtin(_one, name="to_json", signature=((value.type(),), dt.string))
    return fn(value)


#: Spark SQL settings the compiled expressions assume (see to_json)
SPARK_SQL_CONF = {"spark.sql.jsonGenerator.ignoreNullFields": "false"}


@ibis.udf.scalar.builtin(name="epoch_us")
def _duckdb_epoch_us(value: dt.timestamp) -> dt.int64:
    """DuckDB: microseconds since the epoch."""


@ibis.udf.scalar.builtin(name="unix_micros")
def _spark_unix_micros(value: dt.timestamp) -> dt.int64:
    """Spark: microseconds since the epoch."""


def epoch_micros(value: ir.TimestampValue, dialect: Dialect) -> ir.IntegerValue:
    """Microseconds since the epoch of a time, a time without a zone taken as UTC on both engines
    (Spark's unix_micros takes only its own TIMESTAMP: a TIMESTAMP_NTZ is cast, in the run's UTC)."""
    if dialect is Dialect.duckdb:
        return _duckdb_epoch_us(value)
    return _spark_unix_micros(value.cast(dt.Timestamp(timezone="UTC")) if value.type().timezone is None else value)


def whole_seconds_since(value: ir.TimestampValue, now: float, dialect: Dialect) -> ir.IntegerValue:
    """Whole seconds from `value` (UTC wall time) to `now` (epoch seconds), counted in integer
    microseconds: Ibis's epoch_seconds is fractional on DuckDB and whole on Spark, and a float
    literal needs Ibis's PySpark backend loaded to compile."""
    micros = _duckdb_epoch_us(value) if dialect is Dialect.duckdb else _spark_unix_micros(value)
    return ((ibis.literal(round(now * 1_000_000), "int64") - micros) // 1_000_000).cast("int64")


def hash64(value: ir.Value, dialect: Dialect) -> ir.IntegerValue:
    """A 64-bit hash of a value, text or a struct of columns (each engine's own function: DuckDB's
    hash, Spark's xxhash64). Checks aggregate it, not the values, where all they need to know is
    whether a group holds more than one value: min != max of a number is a plain hash aggregate on
    Spark, where min/max of text falls back to sorting every row and a count of distinct values
    multiplies the rows (Expand). Spark's hash skips a struct's null fields: a caller hashing
    columns that may be null adds their null flags. Two values colliding would hide a difference:
    at 2^-64 per pair, not a concern next to the data's own faults."""
    name = "hash" if dialect is Dialect.duckdb else "xxhash64"
    return ibis.udf.scalar.builtin(_one, name=name, signature=((value.type(),), dt.int64))(value)


def key_hash(t: ir.Table, columns: Sequence[str], dialect: Dialect) -> ir.IntegerValue:
    """The 64-bit hash (hash64) of a row's key columns (one column: of its value; a null key
    hashes too). Equal keys hash equal: a collision only takes a row more, which an exact
    comparison or the check itself then drops."""
    return hash64(t[columns[0]] if len(columns) == 1 else ibis.struct({c: t[c] for c in columns}), dialect)


def keys_of_several(t: ir.Table, keys: list[str], dialect: Dialect, values: str | None = None) -> ir.Table:
    """The distinct `keys` of the rows of `t` that are more than one row (`values` None), or that
    hold more than one value of column `values` (min != max of its hash64, a cheap aggregate).

    On DuckDB in two steps: the groups of a 64-bit hash of the key first, then the exact keys of
    the rows whose hash is in a group that qualifies (few: the keys that qualify, and a rare
    collision). DuckDB's aggregate of 100M nearly unique text keys ran out of memory under a
    1.5GB memory_limit, where one of 8-byte hashes spills. Exact either way: equal keys have
    equal hashes. Spark aggregates the keys at once; its aggregate spills as it is, and the rows
    of the hashes would be met by a join of every record."""
    def qualifying(rows: ir.Table, by: list[str]) -> ir.Table:
        if values is None:
            return rows.group_by(by).aggregate(_n=rows.count()).filter(lambda g: g._n > 1).select(*by)
        h = hash64(rows[values], dialect)
        groups = rows.group_by(by).aggregate(_lo=h.min(), _hi=h.max())
        return groups.filter(groups._lo != groups._hi).select(*by)

    if dialect is not Dialect.duckdb:
        return qualifying(t, keys)
    t = t.select(*keys, *([values] if values else []))
    hashed = t.mutate(_key=hash64(ibis.struct({k: t[k] for k in keys}), dialect))
    return qualifying(hashed.semi_join(qualifying(hashed, ["_key"]), "_key"), keys)


@ibis.udf.agg.builtin(name="bit_or")
def bit_or(value: dt.int64) -> dt.int64:
    """The bitwise OR of a group's values (both engines' own aggregate; Ibis compiles none for Spark)."""


def first_n(values: ir.ArrayValue, n: int, dialect: Dialect) -> ir.ArrayValue:
    """The first `n` elements (Ibis's generic slice is written out at length for Spark)."""
    name = "list_slice" if dialect is Dialect.duckdb else "slice"
    fn = ibis.udf.scalar.builtin(_three, name=name, signature=((values.type(), dt.int32, dt.int32), values.type()))
    return fn(values, 1, n)


# The bodies of builtin functions whose signature is given at the call (a struct's fields): only
# the number of arguments counts.
def _one(a): ...
def _three(a, b, c): ...

"""Blob checks (EO401-EO403): the blob prefix, listed by Spark, against what records publish.

`eo-blobs` uris are names relative to the producing endpoint's blob prefix (or absolute URIs
under it). Listing and hashing run on the executors (Spark's binaryFile source).
"""

from __future__ import annotations

from collections.abc import Iterator
from urllib.parse import urlparse

from pyspark.sql import functions as F

from eoctl.checks import Hit
from eoctl.checks.context import BLOB_REFS, AuditContext
from eoctl.errors import SourceError


def prefix_path(uri: str) -> str:
    parsed = urlparse(uri)
    return (parsed.netloc + parsed.path if parsed.scheme not in ("", "file") else parsed.path).rstrip("/") + "/"


def relative_name(uri, prefix: str):
    """A blob reference as a name relative to the prefix (absolute URIs under it are shortened)."""
    start = F.instr(uri, prefix)
    return F.when(start > 0, uri.substr(start + len(prefix), F.lit(1 << 30))).otherwise(uri)


def listing(ctx: AuditContext, name: str, with_hash: bool = False):
    """name (relative to the prefix), size, modified[, sha256] of every blob under the prefix."""
    return ctx.blob_listing(name, with_hash, lambda: _list(ctx, name, with_hash))


def _list(ctx: AuditContext, name: str, with_hash: bool):
    from pyspark.sql.utils import AnalysisException

    uri = ctx.endpoints[name].blobs
    assert uri is not None
    prefix = prefix_path(uri)
    try:
        # gc-blobs (or the pipeline) may move a blob away between Spark's listing and its read:
        # the audit then sees it gone, as a listing a moment later would, instead of failing.
        files = (ctx.spark.read.format("binaryFile").option("recursiveFileLookup", "true")
                 .option("ignoreMissingFiles", "true").load(uri))
    except AnalysisException as exc:
        raise SourceError(f"blob prefix {uri} cannot be listed: {str(exc).splitlines()[0]}") from None
    rel = F.expr(f"substring(path, instr(path, '{prefix}') + {len(prefix)})")
    cols = [rel.alias("name"), F.col("length").alias("size"), F.col("modificationTime").alias("modified")]
    if with_hash:
        cols.append(F.sha2("content", 256).alias("actual_sha256"))
    return files.select(*cols)


def _references(ctx: AuditContext, name: str):
    """Blob references in records sent by this endpoint: name, expected sha256, the record."""
    prefix = prefix_path(ctx.endpoints[name].blobs or "")
    r = ctx.valid_records.where((F.col("producer") == name) & F.col("blobs").isNotNull())
    refs = r.select("topic", "partition", "offset", "message_id", F.explode(F.from_json("blobs", BLOB_REFS)).alias("b"))
    # absolute URIs under the prefix become relative names
    return refs.select("topic", "partition", "offset", "message_id", relative_name(F.col("b.uri"), prefix).alias("name"),
                       F.col("b.sha256").alias("expected_sha256"))


def _with_blobs(ctx: AuditContext) -> Iterator[str]:
    return (n for n, ep in ctx.endpoints.items() if ep.blobs)


def orphan_blobs(ctx: AuditContext) -> Iterator[Hit]:
    """EO401: a prepared blob no record and no pending entry publishes, older than the grace
    period (gc candidate). Young blobs may belong to an attempt still running."""
    for name in _with_blobs(ctx):
        published = _references(ctx, name).select("name")
        pending = ctx.pending_outgoing.where(F.col("sender") == name).select(
            F.explode("blob_refs.uri").alias("name"))
        orphans = (listing(ctx, name).where(F.col("modified") < ctx.ts(ctx.options.grace))
                   .join(published, "name", "left_anti").join(pending, "name", "left_anti"))
        intents = ctx.intents
        if intents is not None:
            registered = intents.where(F.col("kind") == "blob").select(
                F.col("ref").alias("name"), F.col("incoming_message_id").alias("registered_by_message"),
                F.col("attempt_id").alias("registered_by_attempt"))
            orphans = orphans.join(registered, "name", "left")
        yield "EO401", name, ctx.endpoints[name].blobs, orphans


def dangling_references(ctx: AuditContext) -> Iterator[Hit]:
    """EO402: a record publishes a blob the prefix does not have: its data is lost."""
    for name in _with_blobs(ctx):
        names = listing(ctx, name).select("name")
        yield "EO402", name, ctx.endpoints[name].blobs, _references(ctx, name).join(names, "name", "left_anti")


def hash_mismatches(ctx: AuditContext) -> Iterator[Hit]:
    """EO403: the blob's content is not what its message's sha256 says (overwritten or changed)."""
    for name in _with_blobs(ctx):
        hashed = listing(ctx, name, with_hash=True).select("name", "actual_sha256")
        refs = _references(ctx, name)
        bad = refs.join(hashed, "name").where(F.lower(F.col("expected_sha256")) != F.col("actual_sha256"))
        yield "EO403", name, ctx.endpoints[name].blobs, bad

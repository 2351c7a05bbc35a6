"""Blob checks (EO401-EO403), written once: a blob prefix's listing against what records publish.

`eo-blobs` uris are names relative to the producing endpoint's blob prefix (or absolute URIs
under it). The listing (name relative to the prefix, size, modified, actual_sha256) is the
engine's: Spark's binaryFile source, or fsspec.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING
from urllib.parse import urlparse

from eoctl.expr.functions import Dialect, blob_refs
from eoctl.expr.inputs import Hit, Scope
from eoctl.expr.outbox import pending_outgoing
from eoctl.expr.tokens import _registered

if TYPE_CHECKING:
    import ibis.expr.types as ir


def prefix_path(uri: str) -> str:
    """The path a blob prefix URI's listing names files by (host and path, `/`-terminated)."""
    parsed = urlparse(uri)
    return (parsed.netloc + parsed.path if parsed.scheme not in ("", "file") else parsed.path).rstrip("/") + "/"


def relative_name(uri: ir.StringValue, prefix: str) -> ir.StringValue:
    """A blob reference as a name relative to the prefix: a URI or path whose path (a scheme and
    its `//` taken off) starts with the prefix's path is shortened; any other is a name already."""
    path = uri.re_replace(_SCHEME, "")
    return path.startswith(prefix).ifelse(path.substr(len(prefix)), uri)


_SCHEME = r"^[A-Za-z][A-Za-z0-9+.-]*:(//)?"


def relative_name_of(uri: str, prefix: str) -> str | None:
    """relative_name for one reference in Python (trace reads a message's blobs one by one): the
    same name the audit compares with the listing, or None when it leaves the prefix (`..`, a
    root, a NUL): such a name matches no listed blob (EO402 for the audit), and nothing outside
    the prefix is ever opened."""
    import re

    path = re.sub(_SCHEME, "", uri)
    name = path[len(prefix):] if path.startswith(prefix) else uri
    if not name or "\0" in name or name.startswith("/") or ".." in name.split("/"):
        return None
    return name


def _references(scope: Scope, records: ir.Table, name: str, dialect: Dialect) -> ir.Table:
    """Blob references in records sent by this endpoint: name, expected sha256, the record."""
    prefix = prefix_path(scope.endpoints[name].blobs or "")
    r = records.filter(records.problem.isnull() & (scope.as_endpoint(records.producer) == name)
                       & records.blobs.notnull())
    refs = r.select("topic", "partition", "offset", "message_id", b=blob_refs(r.blobs, dialect).unnest())
    # distinct: a record two endpoints read is in the working copy once per reader
    return refs.select("topic", "partition", "offset", "message_id", name=relative_name(refs.b.uri, prefix),
                       expected_sha256=refs.b.sha256).distinct()


def _with_blobs(scope: Scope) -> Iterator[str]:
    return (n for n, ep in scope.endpoints.items() if ep.blobs)


def orphan_blobs(scope: Scope, records: ir.Table, dialect: Dialect) -> Iterator[Hit]:
    """EO401: a prepared blob no record and no pending entry publishes, older than the grace
    period (gc candidate). Young blobs may belong to an attempt still running."""
    pending = pending_outgoing(scope, dialect)
    for name in _with_blobs(scope):
        prefix = prefix_path(scope.endpoints[name].blobs or "")
        listing = scope.blobs(name)
        # valid records of this producer, or of no producer (they might be its), as gc-blobs reads them
        r = records.filter(records.problem.isnull() & ((scope.as_endpoint(records.producer) == name)
                                                        | records.producer.isnull())
                           & records.blobs.notnull())
        sent = r.select(b=blob_refs(r.blobs, dialect).unnest())
        published = sent.select(name=relative_name(sent.b.uri, prefix))
        mine = pending.filter(pending.sender == name)
        refs = mine.select(b=mine.blob_refs.unnest())  # unnested first: Spark cannot take a field of explode()
        held = refs.select(name=relative_name(refs.b.uri, prefix))
        orphans = listing.filter(listing.modified < scope.ago(scope.options.grace)).select(
            "name", "size", "modified").anti_join(published, "name").anti_join(held, "name")
        registered = _registered(scope, "blob", "name", name)
        if registered is not None:
            orphans = orphans.left_join(registered, "name").drop("name_right")
        yield Hit(name, scope.endpoints[name].blobs, orphans)


def dangling_references(scope: Scope, records: ir.Table, dialect: Dialect) -> Iterator[Hit]:
    """EO402: a record publishes a blob the prefix does not have: its data is lost."""
    for name in _with_blobs(scope):
        names = scope.blobs(name).select("name")
        yield Hit(name, scope.endpoints[name].blobs,
                  _references(scope, records, name, dialect).anti_join(names, "name"))


def hash_mismatches(scope: Scope, records: ir.Table, dialect: Dialect) -> Iterator[Hit]:
    """EO403: the blob's content is not what its message's sha256 says (overwritten or changed)."""
    for name in _with_blobs(scope):
        listing = scope.blobs(name)
        refs = _references(scope, records, name, dialect)
        j = refs.join(listing.select("name", "actual_sha256"), "name")
        yield Hit(name, scope.endpoints[name].blobs, j.filter(j.expected_sha256.lower() != j.actual_sha256))

"""The audit's working copy of the records, as one expression for every engine.

Input: the unbound table `protocol` (PROTOCOL_SCHEMA: each record with its endpoint and the raw
bytes of each protocol header, as the engine's reader decodes them) and `commits` (COMMITS_SCHEMA:
each endpoint's committed offsets). Output: RECORD_COLUMNS, what every check reads.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import ibis

from eoctl.expr.functions import Dialect, json_refs_valid, utf8_text
from eoctl.sources.records import PROTOCOL_COLUMNS

if TYPE_CHECKING:
    from collections.abc import Sequence

    import ibis.expr.types as ir

#: the protocol headers, in order
HEADERS = PROTOCOL_COLUMNS

PROTOCOL_SCHEMA = ibis.schema({
    "endpoint": "string", "topic": "string", "partition": "int32", "offset": "int64", "timestamp": "timestamp",
    **{h: "binary" for h in HEADERS},
})
COMMITS_SCHEMA = ibis.schema({"c_endpoint": "string", "c_topic": "string", "c_partition": "int32",
                              "committed": "int64"})

#: the working copy's columns, and the record index's (eoctl.incremental)
RECORD_COLUMNS = ("endpoint", "topic", "partition", "offset", "timestamp", "processed", "committed", "message_id",
                  "token_id", "producer", "seq", "causation_id", "attempt_id", "blobs", "problem")


def protocol_table(name: str = "protocol") -> ir.Table:
    return ibis.table(PROTOCOL_SCHEMA, name=name)


def commits_table(name: str = "commits") -> ir.Table:
    return ibis.table(COMMITS_SCHEMA, name=name)


def working_copy(protocol: ir.Table, commits: ir.Table, dialect: Dialect, sequence_text: bool = False) -> ir.Table:
    """Records with their headers as text (NULL where not UTF-8), `seq`, `committed`, `processed`
    (below the committed offset; no commit: not processed) and `problem`: why the record's
    protocol headers are unusable (EO105), else NULL. `sequence_text`: also `sequence`, the
    eo-sequence header as text (what trace shows and matches on)."""
    text = protocol.mutate(**{f"{h}_text": utf8_text(protocol[h], dialect) for h in HEADERS})
    seq = text.sequence_text.try_cast("int64")
    not_utf8 = ibis.or_(*[text[h].notnull() & text[f"{h}_text"].isnull() for h in HEADERS])
    problem = (
        ibis.cases(
            (text.message_id.isnull() | text.token_id.isnull(), "missing eo-message-id or eo-token-id header"),
            (not_utf8, "protocol header is not UTF-8"),
            (text.sequence_text.notnull() & seq.isnull(), "eo-sequence is not an integer"),
            (text.blobs_text.notnull() & ~json_refs_valid(text.blobs_text, dialect),
             "eo-blobs is not a JSON list of {uri, sha256}"),
            else_=ibis.null("string"),
        )
    )
    with_commit = text.left_join(
        commits, [text.endpoint == commits.c_endpoint, text.topic == commits.c_topic,
                  text.partition == commits.c_partition])
    return with_commit.select(
        "endpoint", "topic", "partition", "offset", "timestamp",
        processed=ibis.coalesce(with_commit.offset < with_commit.committed, False),
        committed=with_commit.committed,
        message_id=with_commit.message_id_text, token_id=with_commit.token_id_text,
        producer=with_commit.producer_text, seq=seq.name("seq"), causation_id=with_commit.causation_id_text,
        attempt_id=with_commit.attempt_id_text, blobs=with_commit.blobs_text, problem=problem,
        **({"sequence": with_commit.sequence_text} if sequence_text else {}),
    )


def records_table(name: str = "records", columns: Sequence[str] | None = None) -> ir.Table:
    """The working copy, unbound: what checks are written against. `columns`: only these (a
    table of the records an engine keeps for a flow that reads no others)."""
    schema = dict(zip(RECORD_COLUMNS, (
        "string", "string", "int32", "int64", "timestamp", "boolean", "int64", "string", "string", "string",
        "int64", "string", "string", "string", "string")))
    return ibis.table(ibis.schema({c: schema[c] for c in columns} if columns is not None else schema), name=name)

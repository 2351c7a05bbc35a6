"""The audit's checks, one module per area. Each check is a function of the shared AuditContext
that yields (code, endpoint, where, evidence DataFrame); the runner counts and samples them."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from eoctl.checks.context import AuditContext

Hit = tuple[str, str, str, "DataFrame"]
Check = Callable[["AuditContext"], Iterator[Hit]]


def all_checks() -> dict[str, Check]:
    """code -> check, in catalog order. Imported lazily: the checks import pyspark."""
    from eoctl.checks import blobs, outbox, sinks, tokens, topics, transactions

    return {
        "EO101": topics.redelivered_copies,
        "EO102": topics.message_under_several_tokens,
        "EO103": topics.sequence_on_several_messages,
        "EO104": topics.sequence_gaps,
        "EO105": topics.records_without_protocol,
        "EO106": topics.undecodable_archive_lines,
        "EO201": tokens.orphan_tokens,
        "EO202": tokens.silent_loss,
        "EO203": tokens.leaked_tokens,
        "EO204": tokens.committed_below_log_start,
        "EO301": outbox.stuck_entries,
        "EO302": outbox.ghost_messages,
        "EO401": blobs.orphan_blobs,
        "EO402": blobs.dangling_references,
        "EO403": blobs.hash_mismatches,
        "EO501": sinks.applied_twice,
        "EO502": sinks.conflicting_values,
        "EO601": transactions.hanging_transactions,
    }

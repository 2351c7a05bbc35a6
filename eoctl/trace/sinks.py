"""Finding a message by a sink column (`trace --by order_id=42`), the engine reading the sinks."""

from __future__ import annotations

from typing import TYPE_CHECKING

from eoctl.config.model import Config, SinkConfig
from eoctl.errors import UsageError
from eoctl.trace.reader import SinkRow

if TYPE_CHECKING:
    from eoctl.trace.reader import TraceReader


def find_by_sink_key(reader: TraceReader, config: Config, column: str, value: str) -> tuple[set[str], list[SinkRow]]:
    """Source message ids of the sink rows whose `column` equals `value`."""
    rows, seen_column = reader.sink_lookup(config, column, value)
    if not seen_column:
        known = sorted({f"{s.name}" for ep in config.endpoints.values() for s in ep.sinks})
        raise UsageError(f"--by {column}=...: no configured sink has a column {column!r}"
                         + (f" (sinks: {', '.join(known)})" if known else " (no sinks are configured)"))
    ids = {str(r.row[sink_config(config, r).message_id_column]) for r in rows}
    return ids, rows


def sink_config(config: Config, row: SinkRow) -> SinkConfig:
    return next(s for s in config.endpoints[row.endpoint].sinks if s.name == row.sink)

"""`eoctl trace`: everything eoctl can see about one logical message, and a verdict.

Where each piece comes from, and how it is found without reading more than needed:
- store rows (tokens, pending outbox entries, intents) by indexed SQL lookups, straight from the
  stores (`stores`);
- sink rows by a pushed-down predicate on the sink's message-id or key column (`sinks`, the
  engine's reader);
- blobs named by the message, opened one by one through fsspec (`blobs`: present? sha256 as
  carried?);
- copies on the topics by one filtered scan of every configured input that returns only the
  matching records and a count (the engine's reader: eoctl.engine.spark.trace,
  eoctl.engine.duckdb.trace). The scan starts at `--since` (on Kafka: the offsets of that time,
  asked of the broker) or, failing that, at the store's first sign of the message less `--window`;
  otherwise it reads the whole topic and says so. A second, time-bounded pass looks for the other
  attempts of the same incoming message (EO302), the records sharing a copy's producer and sequence
  (EO103), and copies a token lookup revealed (`run`).

The message's findings are not decided here: the audit's own checks run over the rows gathered
(eoctl.trace.findings), and the verdict follows the findings that name the
message (`verdict`); the facts only refine it and say why in words (`timeline` tells the story).

Nothing is collected but the matches: a message has a handful of copies.
"""

from eoctl.trace.model import (
    Blob,
    Copy,
    Entry,
    Event,
    Intent,
    Lookup,
    MessageTrace,
    TokenRow,
    TraceOptions,
    TraceResult,
    Verdict,
)
from eoctl.trace.reader import ScanNote, SinkRow, TraceReader
from eoctl.trace.run import run_trace

__all__ = ["Blob", "Copy", "Entry", "Event", "Intent", "Lookup", "MessageTrace", "ScanNote", "SinkRow", "TokenRow",
           "TraceOptions", "TraceReader", "TraceResult", "Verdict", "run_trace"]

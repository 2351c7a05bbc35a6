"""What a run that reads the pipeline is told: the time it judges ages against, the grace periods,
which endpoints and records. Engine-neutral: both engines' scopes read it."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from pathlib import Path

from eoctl.sources.kafka import OffsetRange


@dataclass
class AuditOptions:
    now: dt.datetime = field(default_factory=lambda: dt.datetime.now(dt.timezone.utc))
    grace: dt.timedelta = dt.timedelta(hours=24)
    stuck_after: dt.timedelta = dt.timedelta(minutes=15)
    transaction_timeout: dt.timedelta = dt.timedelta(minutes=15)
    endpoints: list[str] | None = None
    ranges: list[OffsetRange] | None = None
    since: dt.datetime | None = None  # only records at or after this time
    until: dt.datetime | None = None  # only records before this time
    evidence_rows: int = 1000  # inline evidence rows per finding; the rest go to Parquet
    evidence_dir: Path | None = None
    since_last: bool = False  # continue from the record index of the last recorded run
    keep_index: bool = False  # keep the working copy as this run's record index (it is recorded)

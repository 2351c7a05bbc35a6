"""One run-id style for every command that has runs (audit, reconcile-tokens, gc, replay)."""

from __future__ import annotations

import datetime as dt
import uuid


def new_run_id(at: dt.datetime | None = None) -> str:
    """Sortable by time, unique across hosts: 20261121T031500Z-1a2b3c4d; `at`: the run's start
    (default now)."""
    at = (at or dt.datetime.now(dt.timezone.utc)).astimezone(dt.timezone.utc)
    return at.strftime("%Y%m%dT%H%M%SZ") + "-" + uuid.uuid4().hex[:8]

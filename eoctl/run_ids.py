"""One run-id style for every command that has runs (audit, reconcile-tokens, gc, replay)."""

from __future__ import annotations

import datetime as dt
import uuid


def new_run_id() -> str:
    """Sortable by time, unique across hosts: 20261121T031500Z-1a2b3c4d."""
    return dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ") + "-" + uuid.uuid4().hex[:8]

"""Evidence values as JSON takes them (times with their offset, bytes as hex): what every engine
brings back of a finding or a plan."""

from __future__ import annotations

import datetime as dt
from typing import Any


def jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, dt.datetime):
        # stores and readers give naive UTC or aware times (eoctl.trace.model.utc): always the offset
        return (value.replace(tzinfo=dt.timezone.utc) if value.tzinfo is None else value).isoformat()
    if isinstance(value, (bytes, bytearray)):
        return value.hex()
    return value



"""Topic archives: topics copied to files (Parquet or JSON lines) in the Kafka record schema.

JSON archives carry `key`, `value` and header values as base64 strings, as Spark's own JSON
writer encodes binary. Committed offsets come from the configuration or from a
`_committed_offsets.json` file inside the archive folder (Spark skips files starting with `_`).

A JSON line that does not decode as a record (not JSON, a field of the wrong type, no topic,
partition or offset) is never read as a record; `undecodable_lines` names each one by file and
line so the audit reports it (EO106) instead of scanning less in silence.
"""

from __future__ import annotations

import json
from pathlib import Path

from eoctl.config.model import TopicInput
from eoctl.errors import SourceError

COMMITTED_OFFSETS_FILE = "_committed_offsets.json"


#: what a topic archive file holds, said when one does not
RECORD_COLUMNS_TEXT = "topic, partition, offset, timestamp, key, value, headers"


def check_archive_files(archive: str, misfits: list[tuple[str, list[str]]]) -> None:
    """SourceError (exit 3) naming the first file of `archive` that is no topic archive file (file,
    the record columns it lacks), from an engine's reading of the files' footers; both engines
    say it alike."""
    if misfits:
        file, missing = misfits[0]
        if file.startswith("file:"):
            file = file[len("file://"):] if file.startswith("file://") else file[len("file:"):]
        more = f" (and {len(misfits) - 1} more file{'s' if len(misfits) > 2 else ''})" if len(misfits) > 1 else ""
        raise SourceError(f"topic archive {archive}: {file} is not a topic archive file: it lacks the record "
                          f"column{'s' if len(missing) > 1 else ''} {', '.join(missing)}{more}",
                          hint=f"expected columns {RECORD_COLUMNS_TEXT}; move the file out of the archive")


def _misfit_local_parquet(files: list[str]) -> list[tuple[str, list[str]]]:
    """(file, the record columns it lacks) of each local Parquet file of `files` that is no topic
    archive file, from its footer (Spark takes one file's schema for all and reads a file of
    another schema as rows of nulls, which the topic filter then drops in silence). Files on
    remote filesystems are left to Spark."""
    import pyarrow.parquet as pq

    out = []
    for file in files:
        if not file.startswith("file:"):
            continue
        local = file[len("file://"):] if file.startswith("file://") else file[len("file:"):]
        try:
            names = set(pq.read_schema(local).names)
        except (OSError, ValueError):  # cut short or not Parquet: Spark's read names it (engine.errors)
            continue
        missing = [c for c in ("topic", "partition", "offset", "headers") if c not in names]
        if missing:
            out.append((file, missing))
    return sorted(out)


def archive_committed_offsets(source: TopicInput) -> dict[str, dict[int, int]]:
    """Committed offsets of an archived input: inline, a JSON file, or the file inside the archive."""
    value = source.committed_offsets
    if isinstance(value, dict):
        return value
    path = Path(value) if value else Path(source.archive or ".") / COMMITTED_OFFSETS_FILE
    if value is None and not path.exists():
        raise SourceError(
            f"no committed offsets for archive {source.archive}",
            hint=f"set input.committed_offsets or write {COMMITTED_OFFSETS_FILE} in the archive folder",
        )
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
        return {t: {int(p): int(o) for p, o in parts.items()} for t, parts in raw.items()}
    except FileNotFoundError:
        raise SourceError(f"committed offsets file {path} does not exist") from None
    except (ValueError, AttributeError, TypeError) as exc:
        raise SourceError(
            f"committed offsets file {path} is not JSON of the form {{topic: {{partition: offset}}}}: {exc}"
        ) from None

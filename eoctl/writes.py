"""Files eoctl writes for a user (a report, a metrics file): whole or not at all."""

from __future__ import annotations

import os
from pathlib import Path

from eoctl.errors import SourceError


def write_whole(path: Path, text: str, flag: str) -> None:
    """`text` into `path` whole or not at all: written beside it as `.partial`, then renamed. A
    failed write (a full disk, no right to write) is one line naming the path and why (SourceError,
    exit 3), and leaves no `.partial` behind. A metrics file's collector never reads half a file."""
    tmp = path.with_name(path.name + ".partial")
    try:
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        try:
            tmp.unlink()
        except OSError:
            pass
        reason = os.strerror(exc.errno) if exc.errno else str(exc)
        raise SourceError(f"{flag} {path} cannot be written: {reason}") from None

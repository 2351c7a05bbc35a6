"""The blobs a message names, opened one by one through fsspec: present? the sha256 it carries?"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from eoctl.config.model import Config
from eoctl.trace.model import Blob, utc


def check_blob(config: Config, producer: str | None, uri: str, expected: str | None) -> Blob:
    from eoctl.blobfs import open_prefix

    ep = config.endpoints.get(config.producing(producer) or "")
    if ep is None or ep.blobs is None:
        return Blob(producer or "?", uri, expected, None, None, "the producer has no blob prefix configured")
    from eoctl.expr.blobs import prefix_path, relative_name_of

    name = relative_name_of(uri, prefix_path(str(ep.blobs)))  # as the audit names it
    if name is None:
        return Blob(producer or "?", uri, expected, False, None,
                    "outside the producer's blob prefix: not read (no listed blob has this name)")
    fs, root = open_prefix(str(ep.blobs), ep.blob_options)
    path = f"{root.rstrip('/')}/{name}"
    try:
        info = fs.info(path)
        digest = hashlib.sha256()
        with fs.open(path, "rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                digest.update(chunk)
    except FileNotFoundError:
        return Blob(producer or "?", name, expected, False, None)
    try:
        modified = utc(fs.modified(path))
    except (NotImplementedError, OSError):
        modified = None
    actual = digest.hexdigest()
    ok = None if not expected else actual == expected.lower()
    return Blob(producer or "?", name, expected, True, ok, size=info.get("size"), modified=modified,
                actual_sha256=actual)


# ------------------------------------------------------------------------------ the trace


def blob_refs(text: str | None) -> list[dict[str, Any]]:
    try:
        refs = json.loads(text) if text else []
    except ValueError:
        return []
    return [r for r in refs if isinstance(r, dict) and r.get("uri")] if isinstance(refs, list) else []

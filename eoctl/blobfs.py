"""Blob prefixes opened through fsspec, in one place: the audit's listing (DuckDB engine), gc-blobs,
trace and doctor open them alike, with the prefix's `blob_options`, and say alike which extra
to install when a protocol's package is missing (s3fs, gcsfs, adlfs are optional)."""

from __future__ import annotations

from typing import Any

from eoctl.errors import SourceError

#: the protocols whose fsspec package an extra of eoctl installs: protocol -> extra
EXTRAS = {"s3": "s3", "s3a": "s3", "gs": "gcs", "gcs": "gcs", "az": "azure", "abfs": "azure", "abfss": "azure",
          "adl": "azure"}


def open_prefix(uri: str, options: dict[str, Any] | None = None) -> tuple[Any, str]:
    """(filesystem, path) of a blob prefix; a SourceError in one line when it cannot be opened."""
    import fsspec

    try:
        return fsspec.core.url_to_fs(str(uri), **(options or {}))
    except ImportError:
        protocol = str(uri).split("://", 1)[0] if "://" in str(uri) else "file"
        extra = EXTRAS.get(protocol)
        raise SourceError(f"blob prefix {uri} cannot be opened: {protocol}:// needs a package that is not installed",
                          hint=f"pip install 'eoctl[{extra}]'" if extra else
                          f"install the fsspec implementation of {protocol}://") from None
    except ValueError as exc:
        raise SourceError(f"blob prefix {uri} cannot be opened: {str(exc).splitlines()[0]}") from None


def linked_folders(uri: str) -> list[str]:
    """The folders below a local blob prefix that are symbolic links, relative to it: no listing
    goes through them (Spark's follows them, fsspec's does not), so both engines see the same
    blobs and gc-blobs never moves a file that lives outside the prefix. Other stores have no links."""
    import os
    from urllib.parse import urlparse

    parsed = urlparse(str(uri))
    if parsed.scheme not in ("", "file"):
        return []
    root = parsed.path.rstrip("/") or "/"
    out = []
    for folder, dirs, _files in os.walk(root, followlinks=False):
        for d in dirs:
            if os.path.islink(os.path.join(folder, d)):
                out.append(os.path.relpath(os.path.join(folder, d), root))
    return sorted(out)

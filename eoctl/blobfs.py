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

"""Blob prefixes on object stores: a missing protocol package is one line naming the extra to
install, and a blob store's credentials are masked like every secret."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from eoctl.errors import ExitCode
from tests.helpers.cli import run_eoctl
from tests.helpers.servers import REPO

pytestmark = pytest.mark.unit

_WITHOUT = """
import sys
for package in ("s3fs", "gcsfs", "adlfs"):
    sys.modules[package] = None  # as on a machine without it: its import fails
from eoctl.blobfs import open_prefix
from eoctl.errors import SourceError
for uri in sys.argv[1:]:
    try:
        open_prefix(uri, {"anon": True})
    except SourceError as exc:
        print(exc.one_line())
"""


def test_a_missing_protocol_package_names_the_extra_to_install() -> None:
    out = subprocess.run([sys.executable, "-c", _WITHOUT, "s3://bucket/blobs", "gs://bucket/blobs",
                          "abfs://container/blobs"], capture_output=True, text=True, check=True).stdout
    assert out.splitlines() == [
        "blob prefix s3://bucket/blobs cannot be opened: s3:// needs a package that is not installed "
        "(pip install 'eoctl[s3]')",
        "blob prefix gs://bucket/blobs cannot be opened: gs:// needs a package that is not installed "
        "(pip install 'eoctl[gcs]')",
        "blob prefix abfs://container/blobs cannot be opened: abfs:// needs a package that is not installed "
        "(pip install 'eoctl[azure]')"]
    extras = (REPO / "pyproject.toml").read_text()
    assert all(f'{extra} = ["{package}"]' in extras for extra, package in (("s3", "s3fs"), ("gcs", "gcsfs"),
                                                                         ("azure", "adlfs")))


def test_config_check_masks_an_object_store_access_key(tmp_path: Path) -> None:
    path = tmp_path / "eoctl.toml"
    path.write_text('[endpoints.e]\nblobs = "s3://bucket/prefix/"\n'
                    'blob_options = { key = "AKIAEXAMPLEKEYID", secret = "shh-its-secret", '
                    'endpoint_url = "http://minio:9000" }\n')
    for fmt in ("text", "json"):
        proc = run_eoctl("--config", str(path), "--format", fmt, "config", "check")
        assert proc.code == ExitCode.OK, proc.stderr[-2000:]
        out = proc.stdout + proc.stderr
        assert "AKIAEXAMPLEKEYID" not in out and "shh-its-secret" not in out
        assert "http://minio:9000" in out  # what is no secret stays readable

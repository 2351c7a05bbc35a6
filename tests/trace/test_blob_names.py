"""A blob reference is resolved under its producer's prefix in one way for the audit and trace
(eoctl.expr.blobs): a name that leaves the prefix (`..`, a root) names no blob, and trace opens
nothing outside the prefix. Before, trace followed `../../../../etc/passwd` and reported it present
with its size and time (any readable file could be probed), and `../../dev/zero` hashed for ever,
while the audit said EO402 for the same record."""

from __future__ import annotations

from pathlib import Path

import pytest

from eoctl.expr.blobs import prefix_path, relative_name_of
from eoctl.trace.blobs import check_blob
from tests.helpers.chaos import recorded_copy

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("uri, name", [
    ("a.txt", "a.txt"), ("dir/a.txt", "dir/a.txt"), ("/data/blobs/billing/a.txt", "a.txt"),
    ("file:///data/blobs/billing/d/a.txt", "d/a.txt"), ("s3://other/blobs/billing/a.txt", None),
    ("../../../../etc/passwd", None), ("../../dev/zero", None), ("d/../../x", None), ("/etc/passwd", None),
    ("/data/blobs/billing/../shop/a.txt", None), ("a\0b", None), ("", None),
])
def test_a_reference_is_named_under_its_prefix_or_not_at_all(uri: str, name: str | None) -> None:
    assert relative_name_of(uri, prefix_path("/data/blobs/billing")) == (name if name or "://" not in uri else uri)


def test_a_uri_of_an_object_store_prefix_is_named_as_its_listing_names_it() -> None:
    prefix = prefix_path("s3://bucket/blobs/billing")
    assert relative_name_of("s3://bucket/blobs/billing/d/a.txt", prefix) == "d/a.txt"
    assert relative_name_of("s3://bucket/blobs/billing/../shop/a.txt", prefix) is None


def test_trace_never_opens_a_file_outside_the_prefix(tmp_path: Path) -> None:
    chaos = recorded_copy(tmp_path)
    (chaos.blobs.parent / "secret.txt").write_text("not a blob\n")
    present = sorted(p.name for p in chaos.blobs.iterdir())[0]
    assert check_blob(chaos.config, "billing", present, None).present
    for uri in ("../secret.txt", "../../../../etc/passwd", "../../dev/zero", str(chaos.blobs.parent / "secret.txt"),
                str(chaos.blobs / ".." / "secret.txt")):
        blob = check_blob(chaos.config, "billing", uri, None)
        assert blob.present is False and blob.size is None and blob.actual_sha256 is None, uri
        assert "outside the producer's blob prefix" in blob.error

"""Bad arguments are one line and exit 2, naming what was given and what is expected."""

from __future__ import annotations

import pytest

from eoctl.cli.audit_cmd import parse_duration
from eoctl.cli.sources_cmd import parse_range
from eoctl.errors import ExitCode, UsageError
from eoctl.sources.kafka import EARLIEST, LATEST, OffsetRange
from tests.helpers.cli import run_eoctl
from tests.helpers.servers import REPO

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(("text", "expected"), [
    ("orders:-1", "a partition and offsets are 0 or more"),
    ("orders:0:-1", "a partition and offsets are 0 or more"),
    ("orders:0:3:-7", "a partition and offsets are 0 or more"),
    ("orders:0:10:5", "START 10 is above END 5"),
    ("orders", "expected TOPIC:PARTITION[:START[:END]]"),
    ("orders:x", "expected TOPIC:PARTITION[:START[:END]]"),
])
def test_a_range_that_cannot_be_read_is_refused(text: str, expected: str) -> None:
    with pytest.raises(UsageError, match=expected.replace("[", r"\[").replace("]", r"\]")):
        parse_range(text)


def test_ranges_that_can_be_read_are_taken() -> None:
    assert parse_range("orders:0:5:10") == OffsetRange("orders", 0, 5, 10)
    assert parse_range("orders:0:5:5") == OffsetRange("orders", 0, 5, 5)
    assert parse_range("orders:1") == OffsetRange("orders", 1, EARLIEST, LATEST)
    assert parse_range("orders:1::7") == OffsetRange("orders", 1, EARLIEST, 7)


def test_a_duration_past_what_a_clock_holds_is_a_usage_error_not_a_crash() -> None:
    with pytest.raises(UsageError, match="too long"):
        parse_duration("99999999999999999d", "--grace")
    proc = run_eoctl("--config", str(REPO / "samples" / "chaos" / "eoctl.toml"), "--engine", "duckdb", "gc-tokens",
                     "--grace", "99999999999999999d")
    assert proc.code == ExitCode.USAGE
    assert proc.stderr.strip() == "eoctl: error: --grace '99999999999999999d': too long (at most 999999999d)"


def test_a_range_on_a_partition_the_topic_does_not_have_names_the_partitions_there_are() -> None:
    chaos = str(REPO / "samples" / "chaos" / "eoctl.toml")
    for command in (("audit", "--no-record"), ("sources", "scan", "billing")):
        proc = run_eoctl("--config", chaos, "--engine", "duckdb", *command, "--range", "orders:7")
        assert proc.code == ExitCode.USAGE
        assert proc.stderr.strip() == ("eoctl: error: --range orders:7: topic 'orders' has no partition 7 "
                                       "(partitions: 0-1)")

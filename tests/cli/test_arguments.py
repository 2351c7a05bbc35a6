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


def test_a_duration_past_what_a_clock_holds_is_a_usage_error_not_a_crash(tmp_path) -> None:
    """The maximum is one the arithmetic holds: before, 999999999d (then the documented maximum)
    and anything past ~740000d passed the check and crashed subtracting from now, on flags and in
    the configuration alike."""
    from eoctl.config.model import MAX_DURATION_DAYS

    assert parse_duration(f"{MAX_DURATION_DAYS}d", "--grace").days == MAX_DURATION_DAYS
    for text in ("99999999999999999d", "999999999d", "740000d", f"{MAX_DURATION_DAYS + 1}d"):
        with pytest.raises(UsageError, match="too long"):
            parse_duration(text, "--grace")
    chaos = REPO / "samples" / "chaos" / "eoctl.toml"
    proc = run_eoctl("--config", str(chaos), "--engine", "duckdb", "gc-tokens", "--grace", "999999999d")
    assert proc.code == ExitCode.USAGE
    assert proc.stderr.strip() == f"eoctl: error: --grace '999999999d': too long (at most {MAX_DURATION_DAYS}d)"
    at_most = run_eoctl("--config", str(chaos), "--engine", "duckdb", "gc-tokens", "--grace", f"{MAX_DURATION_DAYS}d")
    assert at_most.code == 0, at_most.stderr[-2000:]
    config = tmp_path / "eoctl.toml"
    config.write_text(chaos.read_text().replace('grace = "0s"', 'grace = "740000d"').replace(
        'path = "', f'path = "{chaos.parent}/'))
    proc = run_eoctl("--config", str(config), "--engine", "duckdb", "audit", "--no-record")
    assert proc.code == ExitCode.USAGE and "audit.grace" in proc.stderr and "too long" in proc.stderr, proc.stderr


def test_a_range_on_a_partition_the_topic_does_not_have_names_the_partitions_there_are() -> None:
    chaos = str(REPO / "samples" / "chaos" / "eoctl.toml")
    for command in (("audit", "--no-record"), ("sources", "scan", "billing")):
        proc = run_eoctl("--config", chaos, "--engine", "duckdb", *command, "--range", "orders:7")
        assert proc.code == ExitCode.USAGE
        assert proc.stderr.strip() == ("eoctl: error: --range orders:7: topic 'orders' has no partition 7 "
                                       "(partitions: 0-1)")

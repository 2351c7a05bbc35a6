"""`eoctl trace` on the command line: it classifies as the audit does, with the audit's settings."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers.chaos import recorded_copy
from tests.helpers.cli import run_eoctl

pytestmark = pytest.mark.integration


def test_trace_reads_the_audits_settings_and_says_stuck_as_the_audit_does(tmp_path: Path) -> None:
    """[audit] stuck_after decides EO301 for both (before, trace used its own 15m whatever the
    configuration said); an entry EO301 names gives the verdict `stuck`, exit 1 as the audit's."""
    chaos = recorded_copy(tmp_path)
    (stuck,) = [e for e in chaos.ledger if e["fault"] == "stuck"][:1]
    base = ("--config", str(chaos.config_path), "--engine", "duckdb", "--format", "json")

    def both() -> tuple[set[str], str, int]:
        audit = run_eoctl(*base, "audit", "--no-record", "--select", "EO301")
        traced = run_eoctl(*base, "trace", stuck["message_id"])
        message = json.loads(traced.stdout)["messages"][0]
        eo301 = {m for f in json.loads(audit.stdout)["findings"] for row in f["evidence"]
                 for m in [row.get("incoming_message_id")]}
        assert ("EO301" in {f["code"] for f in message["findings"]}) == (stuck["message_id"] in eo301)
        return eo301, message["verdict"], traced.code

    eo301, verdict, code = both()
    assert stuck["message_id"] in eo301 and verdict == "stuck" and code == 1
    text = chaos.config_path.read_text().replace('grace = "0s"', 'grace = "0s"\nstuck_after = "3650d"')
    chaos.config_path.write_text(text)
    eo301, verdict, code = both()
    assert eo301 == set() and verdict == "in flight" and code == 0

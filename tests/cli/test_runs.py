"""`eoctl runs list`: the runs of the commands that change things, their ids for --restore, and how
each ended, from the run log (read only: listing never creates it)."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pytest

from eoctl.errors import ExitCode
from tests.helpers.chaos import recorded_copy
from tests.helpers.cli import run_eoctl

pytestmark = pytest.mark.integration


def _tables(path: Path) -> set[str]:
    with duckdb.connect(str(path), read_only=True) as db:
        return {r[0] for r in db.execute("select table_name from information_schema.tables").fetchall()}


def test_runs_list_names_each_changing_run_for_restore(tmp_path: Path) -> None:
    chaos = recorded_copy(tmp_path)
    args = ("--config", str(chaos.config_path), "--engine", "duckdb")
    empty = run_eoctl(*args, "runs", "list")
    assert empty.code == 0 and "no run of gc-tokens, gc-blobs, replay-outbox or abort-transaction" in empty.stderr
    assert "eoctl_runs" not in _tables(chaos.config_path.parent / "state.duckdb")  # read only

    tokens = json.loads(run_eoctl(*args, "-f", "json", "gc-tokens", "--execute", "--grace", "0s").stdout)
    blobs = json.loads(run_eoctl(*args, "-f", "json", "gc-blobs", "--execute", "--grace", "0s").stdout)
    listed = json.loads(run_eoctl(*args, "-f", "json", "runs", "list").stdout)
    assert listed["schema"] == "eoctl.runs-list/v1" and listed["run"]["command"] == "runs list"
    assert [(r["id"], r["command"], r["status"]) for r in listed["runs"]] == [
        (blobs["run"]["id"], "gc-blobs", "finished"), (tokens["run"]["id"], "gc-tokens", "finished")]
    assert listed["runs"][1]["summary"]["deleted"] == tokens["deleted"]

    only = json.loads(run_eoctl(*args, "-f", "json", "runs", "list", "--command", "gc-tokens").stdout)["runs"]
    restored = run_eoctl(*args, "gc-tokens", "--restore", only[0]["id"], "--execute")  # the id, as listed
    assert restored.code == 0, restored.stderr[-2000:]
    again = json.loads(run_eoctl(*args, "-f", "json", "runs", "list", "--command", "gc-tokens").stdout)["runs"]
    assert [(r["id"], r["status"]) for r in again] == [(tokens["run"]["id"], "restored")]
    text = run_eoctl(*args, "runs", "list")
    assert tokens["run"]["id"] in text.stderr and "restored" in text.stderr

    bad = run_eoctl(*args, "runs", "list", "--command", "audit")
    assert bad.code == ExitCode.USAGE and "expected one of gc-tokens, gc-blobs, gc-outbox, replay-outbox, abort-transaction" in bad.stderr

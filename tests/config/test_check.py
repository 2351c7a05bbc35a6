"""`config check` says every problem first, each with its key path (an unknown key with the one it
was likely meant as), and never says valid when it is not; `config init` writes a commented
starting configuration that is valid as written and with every example uncommented."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from eoctl.errors import ExitCode
from tests.helpers.cli import run_eoctl

pytestmark = pytest.mark.unit

BROKEN = '''\
[stores.s]
type = "duckdb"
path = "state.duckdb"
lock_wait_secondz = 5

[endpoints.e]
store = "s"
blobz = "blobs"

[endpoints.e.input]
topics = "orders"
archive = "topics"

[ops]
quarantine = "."
'''


def test_config_check_lists_every_problem_first_with_its_key_path(tmp_path: Path) -> None:
    path = tmp_path / "eoctl.toml"
    path.write_text(BROKEN)
    text = run_eoctl("--config", str(path), "config", "check")
    assert text.code == ExitCode.USAGE
    assert text.stderr.splitlines() == [
        f"eoctl: error: {path}: 4 problems",
        "  - unknown key 'stores.s.lock_wait_secondz' (did you mean 'lock_wait_seconds'?)",
        "  - endpoints.e.input.topics: input should be a valid list, got 'orders'",
        "  - unknown key 'endpoints.e.blobz' (did you mean 'blobs'?)",
        "  - ops.quarantine: quarantine '.' must be a folder below each blob prefix (not the prefix itself nor "
        "outside it), like .eoctl-quarantine"]
    as_json = run_eoctl("--config", str(path), "--format", "json", "config", "check")
    assert as_json.code == ExitCode.USAGE and as_json.stderr == ""
    out = json.loads(as_json.stdout)
    assert out["valid"] is False and len(out["problems"]) == 4
    # any other command names the first, and says where the rest are
    audit = run_eoctl("--config", str(path), "audit")
    assert audit.code == ExitCode.USAGE and audit.stderr.strip().endswith(
        "(and 3 more problems: eoctl config check lists them)")


def test_config_init_writes_a_starting_configuration_valid_as_written(tmp_path: Path) -> None:
    path = tmp_path / "eoctl.toml"
    made = run_eoctl("config", "init", str(path))
    assert made.code == 0, made.stderr
    written = path.read_text()
    again = run_eoctl("config", "init", str(path))
    assert again.code == ExitCode.USAGE and "never overwrites" in again.stderr and path.read_text() == written
    check = run_eoctl("--config", str(path), "config", "check")
    assert check.code == 0 and check.stderr.startswith(f"{path}: valid")
    # every example, uncommented, is a key eoctl knows, of the right type
    uncommented = tmp_path / "uncommented.toml"
    uncommented.write_text(re.sub(r"^# (\[|[a-z_]+ = )", r"\1", written, flags=re.MULTILINE))
    assert "[endpoints.billing.input]" in uncommented.read_text().splitlines()
    full = run_eoctl("--config", str(uncommented), "config", "check", env={"PG_PASSWORD": "not-printed"})
    assert full.code == 0, full.stderr
    assert "not-printed" not in full.stderr and 'endpoints.billing.input.topics = ["orders"]' in full.stderr

"""Configured files and folders that do not exist: named by `config check` (exit 3) and by any
command before an engine starts, never a minute later as an engine error."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

from tests.helpers.cli import run_eoctl
from tests.helpers.servers import REPO


def _broken(tmp_path: Path) -> Path:
    shutil.copytree(REPO / "samples" / "chaos", tmp_path / "chaos", ignore=shutil.ignore_patterns("eoctl-history*"))
    config = tmp_path / "chaos" / "eoctl.toml"
    config.write_text(config.read_text().replace('archive = "topics/orders"', 'archive = "topics/ordrs"')
                      .replace('blobs = "blobs/billing"', 'blobs = "blobs/biling"'))
    return config


def test_config_check_names_every_missing_path(tmp_path: Path) -> None:
    config = _broken(tmp_path)
    text = run_eoctl("--config", str(config), "config", "check")
    assert text.code == 3
    errors = [line for line in text.stderr.splitlines() if line.startswith("eoctl: error:")]
    assert errors == [
        f"eoctl: error: endpoints.billing.input.archive: archive folder {config.parent}/topics/ordrs does not exist",
        f"eoctl: error: endpoints.billing.blobs: blob folder {config.parent}/blobs/biling does not exist",
    ]
    as_json = run_eoctl("--config", str(config), "--format", "json", "config", "check")
    assert as_json.code == 3 and len(json.loads(as_json.stdout)["missing_paths"]) == 2
    fine = run_eoctl("--config", str(REPO / "samples" / "chaos" / "eoctl.toml"), "config", "check")
    assert fine.code == 0 and "eoctl: error" not in fine.stderr


def test_a_command_names_a_missing_path_before_spark_starts(tmp_path: Path) -> None:
    config = _broken(tmp_path)
    started = time.monotonic()
    result = run_eoctl("--config", str(config), "audit")
    assert result.code == 3 and time.monotonic() - started < 20  # Spark alone takes longer to start
    assert result.stderr.splitlines() == [
        f"eoctl: error: endpoints.billing.input.archive: archive folder {config.parent}/topics/ordrs does not exist; "
        "1 more: eoctl config check lists them"]

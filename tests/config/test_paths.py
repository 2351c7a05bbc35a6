"""Configured files and folders that do not exist: named by `config check` (exit 3) and by any
command before an engine starts, never a minute later as an engine error."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

from tests.helpers.cli import run_eoctl, without_progress
from tests.helpers.configs import write_config
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
    # every problem first, under one line that never says valid; then the configuration resolved
    assert text.stderr.splitlines()[:3] == [
        f"eoctl: error: {config}: 2 problems",
        f"  - endpoints.billing.input.archive: archive folder {config.parent}/topics/ordrs does not exist",
        f"  - endpoints.billing.blobs: blob folder {config.parent}/blobs/biling does not exist",
    ]
    assert f"{config}: valid" not in text.stderr and f'endpoints.billing.blobs = "file://{config.parent}/blobs/biling"' in text.stderr
    as_json = run_eoctl("--config", str(config), "--format", "json", "config", "check")
    assert as_json.code == 3 and len(json.loads(as_json.stdout)["missing_paths"]) == 2
    fine = run_eoctl("--config", str(REPO / "samples" / "chaos" / "eoctl.toml"), "config", "check")
    assert fine.code == 0 and "eoctl: error" not in fine.stderr


def test_a_command_names_a_missing_path_before_spark_starts(tmp_path: Path) -> None:
    config = _broken(tmp_path)
    started = time.monotonic()
    result = run_eoctl("--config", str(config), "audit")
    assert result.code == 3 and time.monotonic() - started < 20  # Spark alone takes longer to start
    assert without_progress(result.stderr) == [
        f"eoctl: error: endpoints.billing.input.archive: archive folder {config.parent}/topics/ordrs does not exist; "
        "1 more: eoctl config check lists them"]


def test_the_history_defaults_to_the_users_state_folder_one_per_configuration(tmp_path: Path, monkeypatch) -> None:
    """Not beside the configuration (for /etc/eoctl/eoctl.toml that would be /etc)."""
    from eoctl.config import load_config

    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    one, two = write_config(tmp_path / "a", ""), write_config(tmp_path / "b", "")
    paths = [Path(load_config(p).history.path) for p in (one, two)]
    assert all(p.is_relative_to(tmp_path / "state" / "eoctl") and p.name == "eoctl-history.duckdb" for p in paths)
    assert paths[0] != paths[1] and paths[0] == Path(load_config(one).history.path)
    explicit = write_config(tmp_path / "a", '[history]\npath = "h.duckdb"\n', name="other.toml")
    assert load_config(explicit).history.path == str(tmp_path / "a" / "h.duckdb")

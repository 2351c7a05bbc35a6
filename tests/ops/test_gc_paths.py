"""Nothing of the user's is moved: gc-blobs refuses a blob prefix that holds, or is inside, another
configured file or folder, and a quarantine that is not a hidden folder below each prefix; an
endpoint without a store is refused before anything is written."""

from __future__ import annotations

import json
import os
from pathlib import Path

import duckdb
import pytest

from eoctl.config import load_config
from eoctl.errors import ConfigError, ExitCode
from tests.helpers.chaos import recorded_copy
from tests.helpers.cli import run_eoctl

pytestmark = pytest.mark.integration


def _files(folder: Path) -> dict[str, int]:
    return {str(p.relative_to(folder)): p.stat().st_size for p in sorted(folder.rglob("*")) if p.is_file()}


def _gc(config: Path, *args: str):
    return run_eoctl("--config", str(config), "--engine", "duckdb", "gc-blobs", *args)


@pytest.mark.parametrize("blobs", [".", "topics", "topics/orders/x"])
def test_a_blob_prefix_over_configured_files_is_refused_before_anything_moves(tmp_path: Path, blobs: str) -> None:
    chaos = recorded_copy(tmp_path)
    config = chaos.config_path
    config.write_text(config.read_text().replace('blobs = "blobs/billing"', f'blobs = "{blobs}"'))
    if blobs.endswith("/x"):
        (config.parent / blobs).mkdir()
    before = _files(config.parent)
    for args in (("--execute", "--grace", "0s"), ("--grace", "0s"), ("--restore", "20261125T031500Z-1a2b3c4d",
                                                                      "--execute")):
        proc = _gc(config, *args)
        assert proc.code == ExitCode.USAGE, proc.stderr[-2000:]
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("eoctl: error: gc-blobs refused: endpoints.billing.blobs ")
        assert ("holds" if blobs != "topics/orders/x" else "is inside") in lines[0]
    assert _files(config.parent) == before  # not a file moved, not a run row written


@pytest.mark.parametrize("quarantine", [".", "./", "..", ".q/..", "quarantine", "/tmp/q", ""])
def test_a_quarantine_that_is_not_a_hidden_folder_below_the_prefix_is_refused(tmp_path: Path, quarantine: str) -> None:
    path = tmp_path / "eoctl.toml"
    path.write_text(f'[ops]\nquarantine = "{quarantine}"\n')
    with pytest.raises(ConfigError, match="quarantine"):
        load_config(path)
    proc = run_eoctl("--config", str(path), "config", "check")
    assert proc.code == ExitCode.USAGE and "quarantine" in proc.stderr


def test_an_endpoint_with_blobs_but_no_store_is_refused_before_a_run_row_is_written(tmp_path: Path) -> None:
    chaos = recorded_copy(tmp_path)
    config = chaos.config_path
    text = config.read_text()
    config.write_text(text.replace('[endpoints.billing]\nstore = "billing"\n', "[endpoints.billing]\n"))
    proc = _gc(config, "--execute", "--grace", "0s")
    assert proc.code == ExitCode.USAGE, proc.stderr[-2000:]
    assert proc.stderr.strip() == ("eoctl: error: endpoints.billing: gc-blobs keeps its journal in the endpoint's "
                                   "store; set 'store'")
    with duckdb.connect(str(config.parent / "state.duckdb"), read_only=True) as db:
        tables = {r[0] for r in db.execute("select table_name from information_schema.tables").fetchall()}
    assert "eoctl_runs" not in tables and "eoctl_journal_blobs" not in tables


def _entries(folder: Path) -> dict[str, str]:
    """Every entry below `folder` but the quarantine: a file's size, a symlink's target."""
    return {str(p.relative_to(folder)): (f"-> {os.readlink(p)}" if p.is_symlink() else str(p.stat().st_size))
            for p in sorted(folder.rglob("*")) if (p.is_symlink() or p.is_file()) and ".eoctl-quarantine" not in p.parts}


def test_a_restore_puts_back_exactly_what_was_quarantined_or_says_what_it_could_not(tmp_path: Path) -> None:
    chaos = recorded_copy(tmp_path)
    (chaos.blobs.parent / "outside.txt").write_text("data\n")
    (chaos.blobs / "zz-relative-link.txt").symlink_to("../outside.txt")  # dangles once in the quarantine
    (chaos.blobs / "zz-absolute-link.txt").symlink_to(chaos.blobs.parent / "outside.txt")
    before = _entries(chaos.blobs)
    gc = _gc(chaos.config_path, "-f", "json", "--execute", "--grace", "0s")
    assert gc.code == 0, gc.stderr[-2000:]
    run_id, moved = json.loads(gc.stdout)["run_id"], json.loads(gc.stdout)["deleted"]
    assert moved >= 3 and "zz-relative-link.txt" not in _entries(chaos.blobs)

    # something of one name is back at the prefix: that blob is not restored, and is said so
    taken = sorted(set(before) - set(_entries(chaos.blobs)))
    obstacle = next(n for n in taken if not n.startswith("zz-"))
    (chaos.blobs / obstacle).write_text("someone else's\n")
    first = _gc(chaos.config_path, "--restore", run_id, "--execute")
    assert first.code == ExitCode.RUNTIME, first.stderr[-2000:]
    assert "not restored (kept in the journal" in first.stderr and f"billing: {obstacle}: a file of that name is at the prefix" in (
        " ".join(first.stderr.split()))
    (chaos.blobs / obstacle).unlink()
    second = _gc(chaos.config_path, "-f", "json", "--restore", run_id, "--execute")
    assert second.code == 0, second.stderr[-2000:]
    assert json.loads(second.stdout)["restore"]["restored"]["blobs"] == 1
    assert _entries(chaos.blobs) == before  # every link back, pointing where it pointed
    assert not (chaos.blobs / ".eoctl-quarantine").exists()


def test_a_symlinked_folder_in_a_blob_prefix_is_listed_alike_on_both_engines_and_never_moved(
        spark, tmp_path: Path) -> None:
    """Hadoop's listing went through a link to a folder (and gc-blobs would move what lives outside
    the prefix); the DuckDB engine's hashed the link itself (IsADirectoryError). Neither lists it."""
    import dataclasses

    from eoctl.audit import select_codes
    from tests.helpers.audits import audit_duckdb, audit_spark
    from tests.helpers.chaos import settled
    from tests.helpers.findings import canonical

    chaos = recorded_copy(tmp_path)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "elsewhere.txt").write_text("not a blob of this prefix\n")
    (chaos.blobs / "linked").symlink_to(outside, target_is_directory=True)
    options = dataclasses.replace(settled(), evidence_rows=100_000)
    codes = select_codes(["EO4"], None)
    on_spark = audit_spark(spark, load_config(chaos.config_path), options, codes)
    on_duckdb = audit_duckdb(load_config(chaos.config_path, overrides={"kind": "duckdb"}), options, codes)
    assert canonical(on_spark) == canonical(on_duckdb)
    names = {row["name"] for f in on_duckdb.findings if f.code == "EO401" for row in f.evidence}
    assert names and not any(n.startswith("linked") for n in names)

    gc = _gc(chaos.config_path, "--execute", "--grace", "0s")
    assert gc.code == 0, gc.stderr[-2000:]
    assert (outside / "elsewhere.txt").read_text() == "not a blob of this prefix\n"
    assert (chaos.blobs / "linked").is_symlink()

"""Property: over thousands of generated pipeline states, gc removes exactly the garbage past the
grace period, never a token or blob that is live, referenced, leaked/published or young.

A state is a cell (tests/helpers/gc_states.py): one message's outcome and one to three tokens and
blobs tied to it. All the cells of a test are written into one archive, one store and one blob
folder and collected by one real gc-tokens and one gc-blobs run (plan and --execute): the Spark
plans cost about as much for one cell as for a few thousand. The default run checks 2,000 cells;
the scale run (`--scale`) 10,000 or EOCTL_GC_STATES: every cell shape once (each outcome with each
multiset of one to three items, young or past the grace period: 9,196 shapes) and random cells.
"""

from __future__ import annotations

import datetime as dt
import os
import random
from pathlib import Path

import duckdb
import pytest

from eoctl.config import load_config
from eoctl.ops import gc_blobs, gc_tokens
from eoctl.ops.gc_flow import GcOptions
from tests.helpers.gc_states import (
    GRACE,
    Cell,
    Item,
    every_shape,
    generated_cells,
    must_remove,
    shape,
    young_garbage,
    write_state,
)

pytestmark = pytest.mark.integration

NOW = dt.datetime(2026, 11, 21, 12, 0, tzinfo=dt.timezone.utc)
# Batches of 50 cut across cells (as batches of any size do) and make dozens of batches; smaller
# ones cost a store connection per few rows.
BATCH = 50


def _described(keys: set[str], truth: dict[str, tuple[Cell, Item]]) -> str:
    return "; ".join(f"{k}: {truth[k]}" for k in sorted(keys)[:10]) + (" ..." if len(keys) > 10 else "")


def _check_gc(spark, folder: Path, cells: list[Cell], engine: str = "spark") -> None:
    state = write_state(folder, cells, NOW)
    config = load_config(state.config_path, overrides={"kind": engine})
    # --max-deletes above the number of items: one run collects all of the garbage
    options = GcOptions(grace=GRACE, now=NOW, execute=True, batch_size=BATCH, max_deletes=len(cells) * 3)

    tokens_run = gc_tokens.gc_tokens(spark, config, options)
    blobs_run = gc_blobs.gc_blobs(spark, config, options)

    with duckdb.connect(str(state.folder / "state.duckdb"), read_only=True) as db:
        left_tokens = {r[0] for r in db.execute("select token_id from dst.eo_tokens").fetchall()}
        left_intents = {r[0] for r in db.execute("select ref from src.eo_intents").fetchall()}
    left_blobs = {p.name for p in state.blob_dir.iterdir() if p.is_file()}

    for truth, left, run in ((state.tokens, left_tokens, tokens_run), (state.blobs, left_blobs, blobs_run)):
        garbage = {k for k, (c, i) in truth.items() if must_remove(c, i)}
        # never anything else: every token and blob not garbage past the grace period is still there
        lost = set(truth) - garbage - left
        assert not lost, f"{len(lost)} removed that must stay: {_described(lost, truth)}"
        # and all of the garbage: planned, removed, counted, and the intents of what was removed with it
        missed = garbage & left
        assert not missed, f"{len(missed)} garbage past the grace period left: {_described(missed, truth)}"
        assert run.totals()["planned"] == run.totals()["deleted"] == len(garbage)
        assert not left_intents & garbage
        # garbage of an attempt that lost, but young: classified, counted, left for a later run
        assert run.totals()["skipped_young"] == sum(young_garbage(c, i) for c, i in truth.values())


def test_gc_removes_exactly_the_garbage_past_the_grace_period(spark, tmp_path: Path) -> None:
    _check_gc(spark, tmp_path, generated_cells(2_000, seed=0))


def test_gc_on_duckdb_removes_exactly_the_garbage_past_the_grace_period(tmp_path: Path) -> None:
    """The same property on the DuckDB engine, over other cells (a different seed)."""
    _check_gc(None, tmp_path, generated_cells(2_000, seed=2), engine="duckdb")


@pytest.mark.scale
@pytest.mark.timeout(3600)
@pytest.mark.parametrize("engine", ["spark", "duckdb"])
def test_gc_removes_exactly_the_garbage_past_the_grace_period_in_every_cell_shape(spark, tmp_path: Path,
                                                                                   engine: str) -> None:
    cells = generated_cells(int(os.environ.get("EOCTL_GC_STATES", "10000")), seed=1)
    assert {shape(c) for c in cells} >= {shape(c) for c in every_shape(random.Random(0))}
    _check_gc(spark, tmp_path, cells, engine)

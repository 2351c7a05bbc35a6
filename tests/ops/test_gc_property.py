"""Property: over about 1,600 random pipeline states, gc removes exactly the garbage past the
grace period, never a token or blob that is live, referenced, leaked/published or young.

Each Hypothesis example writes 400-500 independent cells (states) into one archive and one store
and runs the real gc-tokens and gc-blobs (plan and --execute) once over all of them: few large
examples, since each pays the fixed cost of two Spark plans (4 examples, ~1600 cells in all).
Lists of more than ~420 cells exceed Hypothesis's entropy budget per example (such examples are
dropped, silently with data_too_large suppressed), so longer lists would not mean more cells."""

from __future__ import annotations

import datetime as dt

import duckdb
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eoctl.config import load_config
from eoctl.ops import gc_blobs, gc_tokens
from eoctl.ops.common import GcOptions
from tests.helpers.gc_states import (
    BLOB_KINDS,
    GRACE,
    OUTCOMES,
    TOKEN_KINDS,
    Cell,
    Item,
    must_remove,
    young_garbage,
    write_state,
)

pytestmark = pytest.mark.integration

NOW = dt.datetime(2026, 11, 21, 12, 0, tzinfo=dt.timezone.utc)
# ages from fresh to two days, never within 5 minutes of the grace boundary
AGES = st.integers(0, 2 * 24 * 60).filter(lambda m: abs(m - GRACE.total_seconds() / 60) > 5)
ITEMS = st.one_of(st.builds(Item, st.just("token"), st.sampled_from(TOKEN_KINDS), AGES),
                  st.builds(Item, st.just("blob"), st.sampled_from(BLOB_KINDS), AGES))
CELLS = st.builds(Cell, st.sampled_from(OUTCOMES), st.lists(ITEMS, min_size=1, max_size=3).map(tuple))


@settings(max_examples=4, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture, HealthCheck.data_too_large,
                                 HealthCheck.large_base_example])
@given(cells=st.lists(CELLS, min_size=400, max_size=500))
def test_gc_removes_exactly_the_garbage_past_the_grace_period(spark, tmp_path_factory, cells: list[Cell]) -> None:
    state = write_state(tmp_path_factory.mktemp("state"), cells, NOW)
    config = load_config(state.config_path)
    options = GcOptions(grace=GRACE, now=NOW, execute=True, batch_size=7)

    tokens_run = gc_tokens.gc_tokens(spark, config, options)
    blobs_run = gc_blobs.gc_blobs(spark, config, options)

    with duckdb.connect(str(state.folder / "state.duckdb"), read_only=True) as db:
        left_tokens = {r[0] for r in db.execute("select token_id from dst.eo_tokens").fetchall()}
        left_intents = {r[0] for r in db.execute("select ref from src.eo_intents").fetchall()}
    left_blobs = {p.name for p in state.blob_dir.iterdir() if p.is_file()}

    garbage_tokens = {t for t, (c, i) in state.tokens.items() if must_remove(c, i)}
    garbage_blobs = {b for b, (c, i) in state.blobs.items() if must_remove(c, i)}
    # never anything else: every token and blob not garbage past the grace period is still there
    assert left_tokens == set(state.tokens) - garbage_tokens
    assert left_blobs == set(state.blobs) - garbage_blobs
    # and all of the garbage: planned, removed, counted, and the intents of what was removed with it
    assert tokens_run.totals()["planned"] == tokens_run.totals()["deleted"] == len(garbage_tokens)
    assert blobs_run.totals()["planned"] == blobs_run.totals()["deleted"] == len(garbage_blobs)
    assert not left_intents & (garbage_tokens | garbage_blobs)
    # garbage of an attempt that lost, but young: classified, counted, left for a later run
    assert tokens_run.totals()["skipped_young"] == sum(young_garbage(c, i) for c, i in state.tokens.values())
    assert blobs_run.totals()["skipped_young"] == sum(young_garbage(c, i) for c, i in state.blobs.values())

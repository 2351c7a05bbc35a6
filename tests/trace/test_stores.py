"""Trace's store lookups (eoctl.trace.stores) and the layout they stand on hold each store's file
briefly and once: the chaos sample keeps three stores (a schema per endpoint) in one DuckDB file.

Whether a connection was reused shows from outside: the file is moved away after the first
lookup; a connection still open reads on, a new open fails."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from eoctl.errors import SourceError
from eoctl.stores.layout import StoreLayout
from eoctl.trace.stores import StoreLookups, json_list_items
from tests.helpers.chaos import recorded_copy, store_rows


def _all_tokens(chaos) -> dict[str, set[str]]:
    """endpoint -> the message ids of its tokens, read with plain SQL."""
    out: dict[str, set[str]] = {}
    for schema in ("shop", "billing", "shipping"):
        out[schema] = {m for (m,) in store_rows(chaos, f"select message_id from {schema}.eo_tokens")}
    return out


def test_the_layout_looks_up_every_store_of_a_file_in_one_open(tmp_path: Path) -> None:
    chaos = recorded_copy(tmp_path)
    layout = StoreLayout(chaos.config)
    assert layout.table("shop", "tokens") is not None
    chaos.config_path.parent.joinpath("state.duckdb").rename(tmp_path / "moved.duckdb")
    # the other endpoints' stores are schemas of the same file: looked up in the first open
    for endpoint in ("billing", "shipping"):
        for kind in ("tokens", "outbox"):
            t = layout.table(endpoint, kind)
            assert t is not None and t.store.schema_name == endpoint


def test_lookups_in_a_held_block_read_every_store_of_a_file_through_one_connection(tmp_path: Path) -> None:
    chaos = recorded_copy(tmp_path)
    truth = _all_tokens(chaos)
    ids = set().union(*truth.values())
    state = chaos.config_path.parent / "state.duckdb"
    lookups = StoreLookups(chaos.config)
    lookups.layout.table("shop", "tokens")  # the layout's own open: before the block
    with lookups.held():
        first = lookups.tokens(message_ids=ids, token_ids=set())
        state.rename(tmp_path / "moved.duckdb")  # a new open would fail from here on
        again = lookups.tokens(message_ids=ids, token_ids=set())
        entries = lookups.entries(incoming=ids, outgoing=set(), tokens=set())
    by_endpoint: dict[str, set[str]] = {}
    for t in first:
        by_endpoint.setdefault(t.endpoint, set()).add(t.message_id)
    assert by_endpoint == {e: m for e, m in truth.items() if m}  # each endpoint's rows, from its schema
    assert sorted(map(repr, again)) == sorted(map(repr, first))
    assert entries  # the outbox tables too, through the same connection
    # outside a block each lookup opens the file again: it is gone
    with pytest.raises(SourceError, match="does not exist"):
        lookups.tokens(message_ids=ids, token_ids=set())


def test_a_held_block_lets_go_of_the_file_at_its_end(tmp_path: Path) -> None:
    chaos = recorded_copy(tmp_path)
    state = chaos.config_path.parent / "state.duckdb"
    lookups = StoreLookups(chaos.config)
    with lookups.held():
        assert lookups.tokens(message_ids={"none"}, token_ids={"none"}) == []
        with pytest.raises(duckdb.Error):  # read-only in this process: no writer may open it
            duckdb.connect(str(state)).close()
    writer = duckdb.connect(str(state))  # the pipeline's writer gets the file at once
    writer.execute("insert into shop.eo_tokens (token_id, message_id, destination, attempt_id, created_at) "
                   "values ('t-new', 'm-new', 'shop', 'a-new', now())")
    writer.close()
    found = lookups.tokens(message_ids={"m-new"}, token_ids=set())
    assert [(t.endpoint, t.token_id) for t in found] == [("shop", "t-new")]


_JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
                     lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
                     max_leaves=12)


@settings(max_examples=300, deadline=None)
@given(items=st.lists(_JSON, max_size=6), indent=st.sampled_from([None, 0, 2]), pad=st.sampled_from(["", " \n\t"]))
def test_a_json_list_is_read_item_by_item_as_json_reads_it_whole(items, indent, pad) -> None:
    text = pad + json.dumps(items, indent=indent) + pad
    assert list(json_list_items(text)) == json.loads(text)


@settings(max_examples=300, deadline=None)
@given(text=st.text(alphabet='[]{},:" 01an\\\nul', max_size=14) | st.builds(lambda v: json.dumps(v)[:-1], _JSON))
def test_text_that_is_no_json_list_holds_no_items(text) -> None:
    """Exactly the texts json.loads reads as a list are read; every other raises ValueError (an
    entry of such text holds no message, as one whole parse said)."""
    try:
        whole = json.loads(text)
    except ValueError:
        whole = None
    if isinstance(whole, list):
        assert list(json_list_items(text)) == whole
    else:
        with pytest.raises(ValueError):
            list(json_list_items(text))

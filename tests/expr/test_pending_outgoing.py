"""The pending entries' outgoing messages are parsed from their JSON once per run and kept
(eoctl.engine.run._keep_pending_outgoing), for every check that reads them: the findings are those
of each check parsing the text itself; an entry holding a batch of messages is
named in the run's notes. (What it saves is measured by bench/large_entry_bench.py.)"""

from __future__ import annotations

import datetime as dt
import json
import uuid
from pathlib import Path

import duckdb
import pytest

from eoctl.audit import select_codes
from tests.helpers.audits import audit_duckdb
from tests.helpers.chaos import add_batch_entry, recorded_copy, settled
from tests.helpers.findings import canonical

pytestmark = pytest.mark.integration


def _batch_entry(store: str, messages: int) -> str:
    return add_batch_entry(store, messages)[0]


def test_the_kept_messages_give_the_findings_of_each_check_parsing_them(tmp_path: Path, monkeypatch) -> None:
    """On DuckDB (the keep is engine-free: every Spark audit of the chaos sample reads the kept table,
    and the parity tests hold the engines' findings equal)."""
    from eoctl.engine import run as engine_run
    from eoctl.expr import outbox

    chaos = recorded_copy(tmp_path)
    entry = _batch_entry(chaos.store_target, 300)
    monkeypatch.setattr(outbox, "LARGE_ENTRY", 200)  # the note's threshold, for a test-sized batch
    codes, options = select_codes(None, None), settled()  # one `now`: the same ages

    def audit():
        return audit_duckdb(chaos.config, options, codes)

    kept = audit()
    assert [n for n in kept.notes if "pending outbox entry" in n] == [
        f"pending outbox entry {entry} of billing holds 300 outgoing messages (more than 200): a batch, not one "
        "message's effects; its messages were read once for every check"]
    assert "EO301" in {f.code for f in kept.findings}
    monkeypatch.setattr(engine_run, "_keep_pending_outgoing", lambda _run, _step: None)
    parsed_by_each = audit()
    assert canonical(kept) == canonical(parsed_by_each)
    assert not [n for n in parsed_by_each.notes if "pending outbox entry" in n]


def test_an_entry_above_the_streamed_size_gives_the_findings_of_the_cast(tmp_path: Path, monkeypatch) -> None:
    """An entry longer than STREAMED_ENTRY is read by DuckDB's streaming JSON reader (a file of the
    run's scratch folder; 100x faster than the cast at a million messages, and interruptible), one
    that is no list of messages gives none, as the cast gives it: the findings are those of every
    entry cast in SQL."""
    from eoctl.expr import outbox

    chaos = recorded_copy(tmp_path)
    _batch_entry(chaos.store_target, 300)
    with duckdb.connect(chaos.store_target) as db:  # a large entry that is no list of messages
        at = dt.datetime.now(dt.timezone.utc) - dt.timedelta(hours=2)
        db.execute("insert into billing.eo_outbox values ('billing', ?, ?, ?, ?, null, ?, ?, 1)",
                   [str(uuid.uuid4()), str(uuid.uuid4()), str(uuid.uuid4()),
                    json.dumps({"not": "a list", "pad": "x" * 5000}), at, at])
    codes, options = select_codes(None, None), settled()
    cast = audit_duckdb(chaos.config, options, codes)
    monkeypatch.setattr(outbox, "STREAMED_ENTRY", 1_000)  # both large entries streamed, the sample's cast
    read = []
    from eoctl.engine.duckdb import outgoing

    real = outgoing.stream_outgoing

    def counted(con, view, above):
        real(con, view, above)
        read.append(con.execute(f"select count(*) from {view}").fetchone()[0])

    monkeypatch.setattr(outgoing, "stream_outgoing", counted)
    streamed = audit_duckdb(chaos.config, options, codes)
    assert read and read[0] == 300  # the batch's messages came through the reader, the other entry's none
    assert canonical(streamed) == canonical(cast)
    assert "EO301" in {f.code for f in streamed.findings}

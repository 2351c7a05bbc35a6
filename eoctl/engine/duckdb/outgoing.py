"""The messages of the largest pending outbox entries, read by DuckDB's streaming JSON reader.

DuckDB parses one JSON value in one piece: the `outgoing` of an entry holding a batch of a million
messages (187 MB) took 289 s through a cast and could not be interrupted meanwhile; written to a
file of the run's scratch folder and read by `read_json` it takes 2.6 s, in chunks a signal can
stop between. Entries up to the threshold stay in SQL (eoctl.expr.outbox.pending_outgoing_rows).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from eoctl.engine.duckdb.sql import ident, repr_sql

if TYPE_CHECKING:
    import duckdb

#: the columns of a message as eoctl.expr.functions.OUTGOING declares them
_MESSAGE_COLUMNS = {"message_id": "VARCHAR", "token_id": "VARCHAR", "topic": "VARCHAR", "key": "VARCHAR",
                    "headers": "MAP(VARCHAR, VARCHAR)"}


def stream_outgoing(con: duckdb.DuckDBPyConnection, view: str, above: int) -> None:
    """TEMP TABLE `view` (sender, incoming_message_id, entry_attempt_id, m: a message) of every
    entry of view `outbox` whose `outgoing` is longer than `above` characters. An entry whose text
    is not a JSON list of messages has none, as the cast gives the others (TRY_CAST: NULL)."""
    import duckdb

    from eoctl.scratch import subdir

    columns = "{" + ", ".join(f"{repr_sql(c)}: {repr_sql(t)}" for c, t in _MESSAGE_COLUMNS.items()) + "}"
    message = "struct_pack(" + ", ".join(f"{ident(c)} := {ident(c)}" for c in _MESSAGE_COLUMNS) + ")"
    struct = ", ".join(f"{ident(c)} {t}" for c, t in _MESSAGE_COLUMNS.items())
    con.execute(f"CREATE OR REPLACE TEMP TABLE {ident(view)} (sender VARCHAR, incoming_message_id VARCHAR, "
                f"entry_attempt_id VARCHAR, m STRUCT({struct}))")
    entries = con.execute("SELECT ep, incoming_message_id, attempt_id FROM outbox WHERE length(outgoing) > ?",
                          [above]).fetchall()
    folder = subdir("outgoing")
    for i, (sender, entry, attempt) in enumerate(entries):
        path = folder / f"entry-{i}.json"
        (text,) = con.execute("SELECT outgoing FROM outbox WHERE ep = ? AND incoming_message_id IS NOT DISTINCT FROM ? "
                              "AND attempt_id IS NOT DISTINCT FROM ? AND length(outgoing) > ? LIMIT 1",
                              [sender, entry, attempt, above]).fetchone()
        path.write_text(text, encoding="utf-8")
        del text
        try:
            con.execute(f"INSERT INTO {ident(view)} SELECT ?, ?, ?, {message} FROM read_json({repr_sql(str(path))}, "
                        f"format = 'array', columns = {columns}, maximum_object_size = {path.stat().st_size + 1})",
                        [sender, entry, attempt])
        except duckdb.InvalidInputException:  # not a list of messages: none, as the cast of a smaller entry
            pass
        finally:
            path.unlink(missing_ok=True)

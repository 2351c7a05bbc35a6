"""replay-outbox killed (SIGKILL) at every step of an entry's replay, then run again: it converges,
the downstream applies the entry's messages exactly once, and committed tokens are never made
again. PostgreSQL stores and the real broker; each kill point is reached by holding a lock the
step needs (see tests/helpers/kill.py), and each rerun gets one step further."""

from __future__ import annotations

import datetime as dt
import json
from collections import Counter
from pathlib import Path

import psycopg
import pytest

from eoctl.ops.replay import ReplayOptions, replay
from tests.helpers.chaos import live_run, store_rows
from tests.helpers.kill import eoctl_blocked, kill_when_blocked, start_eoctl
from tests.helpers.servers import wait_until
from tests.ops.test_replay import _downstream, _shipments, _tokens_per_message

pytestmark = pytest.mark.integration


def test_kill_at_every_step_then_rerun_converges(kafka, postgres, tmp_path: Path) -> None:
    chaos = live_run("postgres", tmp_path, kafka, postgres)
    stuck = [e for e in chaos.ledger if e.get("fault") == "stuck" and e["endpoint"] == "billing"]
    fresh = next(e for e in stuck if not e["tokens_committed"])  # needs the token checkpoint
    committed = next(e for e in stuck if e["tokens_committed"])
    db = chaos.store_target
    incoming = {m: t for m, t in store_rows(chaos, "select incoming_message_id, incoming_token_id from billing.eo_outbox")}
    before = _shipments(chaos)

    def kill_at(lock_sql: str, params: tuple, entry: dict) -> None:
        kill_when_blocked(db, lock_sql, params, chaos.config_path, chaos.environ, "replay-outbox", "--execute",
                          "--stuck-after", "0s", "--entry", entry["message_id"])
        assert entry["message_id"] in incoming and store_rows(  # the entry is still pending after each kill
            chaos, f"select count(*) from billing.eo_outbox where incoming_message_id = '{entry['message_id']}'")[0][0] == 1

    # the entry without committed tokens, one step further each time:
    kill_at("lock table billing.eo_intents in exclusive mode", (), fresh)  # 1a registering token intents
    kill_at("lock table shipping.eo_tokens in exclusive mode", (), fresh)  # 1b creating tokens downstream
    kill_at("select 1 from billing.eo_outbox where incoming_message_id = %s for update",  # 1c committing them
            (fresh["message_id"],), fresh)
    assert not store_rows(chaos, "select tokens_committed_at from billing.eo_outbox where incoming_message_id = "
                                 f"'{fresh['message_id']}'")[0][0]
    kill_at("select 1 from billing.eo_tokens where token_id = %s for update",  # 3 after dispatch
            (incoming[fresh["message_id"]],), fresh)
    sent_tokens = store_rows(chaos, "select outgoing from billing.eo_outbox where incoming_message_id = "
                                    f"'{fresh['message_id']}'")[0][0]
    # the entry whose tokens were committed: killed before its delete (after dispatch and token removal)
    kill_at("select 1 from billing.eo_outbox where incoming_message_id = %s for update",
            (committed["message_id"],), committed)

    done = replay(chaos.config, ReplayOptions(stuck_after=dt.timedelta(0),
                                              entries=[fresh["message_id"], committed["message_id"]], execute=True))
    assert {o.entry_id: (o.status, o.tokens_created) for o in done.outcomes} == {
        fresh["message_id"]: ("replayed", 0), committed["message_id"]: ("replayed", 0)}  # no tokens made again
    left = {m for (m,) in store_rows(chaos, "select incoming_message_id from billing.eo_outbox")}
    assert not left & {fresh["message_id"], committed["message_id"]}

    _downstream(chaos)
    assert _shipments(chaos) - before == Counter({fresh["order"]: 1, committed["order"]: 1})
    per_message = _tokens_per_message(kafka, chaos)
    assert all(len(per_message[m]) == 1 for m in fresh["outgoing"])  # copies share their one committed token
    committed_ids = {m["token_id"] for m in sent_tokens}  # psycopg hands back json as Python lists
    assert {next(iter(per_message[m])) for m in fresh["outgoing"]} == committed_ids
    # tokens of the attempts killed before their commit: never sent, registered, so gc can tell them apart
    made = {t for (t,) in store_rows(chaos, "select token_id from shipping.eo_tokens where starts_with(attempt_id, 'eoctl-replay-')")}
    registered = {r for (r,) in store_rows(chaos, "select ref from billing.eo_intents where starts_with(attempt_id, 'eoctl-replay-')")}
    assert made - committed_ids and made <= registered


def test_the_endpoint_moving_an_entry_on_wins_the_race_cleanly(kafka, postgres, tmp_path: Path) -> None:
    """While replay waits to commit its tokens, the endpoint commits its own: replay's version check
    fails, it reports a conflict, and the endpoint's update stands (no lost update)."""
    chaos = live_run("postgres", tmp_path, kafka, postgres)
    fresh = next(e for e in chaos.ledger if e.get("fault") == "stuck" and not e["tokens_committed"])
    endpoint = psycopg.connect(chaos.store_target)
    (outgoing, version), = endpoint.execute(
        "select outgoing, version from billing.eo_outbox where incoming_message_id = %s for update",
        (fresh["message_id"],)).fetchall()
    proc = start_eoctl(chaos.config_path, chaos.environ, "replay-outbox", "--execute", "--stuck-after", "0s",
                       "--entry", fresh["message_id"])
    try:
        assert wait_until(lambda: eoctl_blocked(chaos.store_target), 240, 0.2)
        mine = [{**m, "token_id": f"endpoint-token-{i}"} for i, m in enumerate(outgoing)]
        endpoint.execute("update billing.eo_outbox set outgoing = %s, tokens_committed_at = now(), "
                         "version = version + 1 where incoming_message_id = %s", (json.dumps(mine), fresh["message_id"]))
        endpoint.commit()
    finally:
        endpoint.close()
    out, err = proc.communicate(timeout=300)
    summary = json.loads(out)
    assert proc.returncode == 0, err
    (entry,) = summary["entries"]
    assert entry["status"] == "conflict" and f"since version {version}" in entry["reason"]
    assert entry["tokens_created"] == len(outgoing)  # made before the race was lost: garbage, reported
    stored, = store_rows(chaos, f"select outgoing, version from billing.eo_outbox where incoming_message_id = "
                                f"'{fresh['message_id']}'")
    assert [m["token_id"] for m in stored[0]] == [m["token_id"] for m in mine] and stored[1] == version + 1
    # nothing was sent for it: the topic has no copy of its messages
    assert not set(fresh["outgoing"]) & set(_tokens_per_message(kafka, chaos))

"""replay-outbox on the chaos pipeline over the real broker (DuckDB and PostgreSQL stores): every
stuck entry finished, the downstream applies each message exactly once, poison entries skipped."""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from eoctl.ops.replay import ReplayOptions, replay
from tests.helpers.chaos import ChaosRun, live_run, store_rows
from tests.helpers.pipeline_state import topic_records
from tests.helpers.servers import REPO

pytestmark = pytest.mark.integration

NOW = dict(stuck_after=dt.timedelta(0))


def _downstream(chaos: ChaosRun) -> None:
    """The reference endpoints consume what is new (as they would in production)."""
    run_spec = Path(chaos.spec.out_dir) / "run.json"
    proc = subprocess.run([sys.executable, "-m", "samples.reference.worker", str(run_spec)], cwd=REPO,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]


def _shipments(chaos: ChaosRun) -> Counter:
    return Counter({order: n for order, n in store_rows(
        chaos, "select order_id, count(*) from shipping.shipments group by order_id")})


def _outgoing_ids(chaos: ChaosRun) -> set[str]:
    """Message ids of every pending entry's outgoing messages."""
    rows = store_rows(chaos, "select outgoing from billing.eo_outbox") + store_rows(
        chaos, "select outgoing from shipping.eo_outbox")
    return {m["message_id"] for (o,) in rows for m in (o if isinstance(o, list) else json.loads(o))}


def _tokens_per_message(kafka, chaos: ChaosRun) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for record in topic_records(kafka.bootstrap, chaos.spec.topics["invoices"]):
        out.setdefault(record.message_id, set()).add(record.token_id)
    return out


@pytest.mark.parametrize("kind", ["duckdb", "postgres"])
def test_every_stuck_entry_is_finished_and_applied_once_downstream(kafka, request, tmp_path: Path, kind: str) -> None:
    postgres = request.getfixturevalue("postgres") if kind == "postgres" else None
    chaos = live_run(kind, tmp_path, kafka, postgres)
    stuck = {e["message_id"]: e for e in chaos.ledger if "EO301" in e.get("expect", [])}
    before = _shipments(chaos)
    replayed_messages = _outgoing_ids(chaos)

    plan = replay(chaos.config, ReplayOptions(**NOW))
    assert {o.entry_id for o in plan.outcomes} == set(stuck) and not plan.executed
    assert store_rows(chaos, "select count(*) from billing.eo_outbox")[0][0] + store_rows(
        chaos, "select count(*) from shipping.eo_outbox")[0][0] == len(stuck)  # a plan changes nothing

    steps: list[tuple[int, int]] = []  # what the progress bar is fed: (entries done, of how many)
    done = replay(chaos.config, ReplayOptions(execute=True, **NOW), lambda n, total, _what: steps.append((n, total)))
    assert {o.entry_id: o.status for o in done.outcomes} == {m: "replayed" for m in stuck}
    assert steps == [(n, len(stuck)) for n in range(len(stuck) + 1)]
    for o in done.outcomes:  # tokens are made only where none were committed, never again
        committed = stuck[o.entry_id].get("tokens_committed", True)
        assert (o.tokens_created > 0) == (not committed and o.messages > 0), o
    assert replay(chaos.config, ReplayOptions(execute=True, **NOW)).outcomes == []
    assert not store_rows(chaos, "select * from billing.eo_outbox") and not store_rows(
        chaos, "select * from shipping.eo_outbox")

    _downstream(chaos)
    after = _shipments(chaos)
    billing_stuck = {e["order"] for e in stuck.values() if e["endpoint"] == "billing" and e["fault"] == "stuck"}
    assert after - before == Counter({order: 1 for order in billing_stuck})  # exactly once, nothing else
    # every message eoctl sent carries one token id on all its copies (those the endpoint sent too)
    per_message = _tokens_per_message(kafka, chaos)
    assert replayed_messages and all(len(per_message[m]) == 1 for m in replayed_messages)


def test_a_poison_entry_is_reported_and_never_stalls_the_others(kafka, tmp_path: Path) -> None:
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

    chaos = live_run("duckdb", tmp_path, kafka)
    good = {e["message_id"] for e in chaos.ledger if "EO301" in e.get("expect", [])}
    invoices = chaos.spec.topics["invoices"]
    # the broker refuses records over 4 kB on this topic: a broker error for the last poison entry
    limit = ConfigResource(ConfigResource.Type.TOPIC, invoices, incremental_configs=[
        ConfigEntry("max.message.bytes", "4096", incremental_operation=AlterConfigOpType.SET)])
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap})  # kept alive until the futures resolve
    for future in admin.incremental_alter_configs([limit]).values():
        future.result(30)
    poison = {
        "poison-shape": [{"no": "message id"}],
        "poison-topic": [{"message_id": "m-1", "token_id": None, "topic": "nowhere", "key": None, "headers": {},
                          "value": "{}"}],
        "poison-size": [{"message_id": "m-2", "token_id": None, "topic": invoices, "key": None, "headers": {},
                         "value": "x" * 2_000_000}],
        "poison-broker": [{"message_id": "m-3", "token_id": None, "topic": invoices, "key": None, "headers": {},
                           "value": "x" * 10_000}],
    }
    import duckdb

    with duckdb.connect(chaos.store_target) as db:  # older than every real entry: replayed first
        for i, (entry_id, outgoing) in enumerate(poison.items()):
            created = dt.datetime(2026, 1, 1, 0, 0, i, tzinfo=dt.timezone.utc)
            db.execute("insert into billing.eo_outbox values ('billing', ?, ?, 'a-1', ?, null, ?, ?, 1)",
                       [entry_id, f"tok-{entry_id}", json.dumps(outgoing), created, created])

    # selection: the oldest first, at most --max-entries; --endpoint keeps to its outbox
    assert [o.entry_id for o in replay(chaos.config, ReplayOptions(max_entries=2, **NOW)).outcomes] == [
        "poison-shape", "poison-topic"]
    assert {o.endpoint for o in replay(chaos.config, ReplayOptions(endpoints=["shipping"], **NOW)).outcomes} == {
        "shipping"}

    done = replay(chaos.config, ReplayOptions(execute=True, rate=10, **NOW))
    status = {o.entry_id: (o.status, o.reason or "") for o in done.outcomes}
    assert [o.entry_id for o in done.outcomes][:4] == list(poison)
    assert done.duration_seconds >= (len(done.outcomes) - 1) / 10  # --rate 10: at most ten entries a second
    assert status["poison-shape"][0] == "skipped" and "no message_id or topic" in status["poison-shape"][1]
    assert status["poison-topic"][0] == "skipped" and "'nowhere' is no configured endpoint's input" in status["poison-topic"][1]
    assert status["poison-size"][0] == "skipped" and "over the producer's message.max.bytes" in status["poison-size"][1]
    assert status["poison-broker"][0] == "failed" and "dispatch failed" in status["poison-broker"][1]
    assert {m: s for m, (s, _) in status.items() if m in good} == {m: "replayed" for m in good}
    with duckdb.connect(chaos.store_target, read_only=True) as db:
        left = {r[0] for r in db.execute("select incoming_message_id from billing.eo_outbox").fetchall()}
        new_tokens = db.execute("select count(*) from shipping.eo_tokens where attempt_id like 'eoctl-replay-%'"
                                ).fetchone()[0]
    assert left == set(poison)  # none of them finished: still pending
    assert new_tokens == sum(o.tokens_created for o in done.outcomes)
    # the skipped ones changed nothing; the broker's refusal came after its tokens were committed,
    # so the next run sends the same tokens again instead of making new ones
    assert {o.entry_id: o.tokens_created for o in done.outcomes if o.entry_id in poison} == {
        "poison-shape": 0, "poison-topic": 0, "poison-size": 0, "poison-broker": 1}
    again = replay(chaos.config, ReplayOptions(execute=True, entries=["poison-broker"], **NOW))
    assert [(o.status, o.tokens_committed, o.tokens_created) for o in again.outcomes] == [("failed", True, 0)]


def test_a_second_run_waits_for_the_lease_and_exits_4(tmp_path: Path) -> None:
    """The lease is taken before any entry is touched (and before Kafka is contacted)."""
    import duckdb

    from eoctl.ops.lease import Lease
    from tests.helpers.chaos import recorded_copy
    from tests.helpers.cli import run_eoctl

    held = Lease(recorded_copy(tmp_path).config, "replay-outbox", "other-run").acquire()
    try:  # held by a live process: this test's
        result = run_eoctl("--config", str(tmp_path / "chaos" / "eoctl.toml"), "replay-outbox", "--execute",
                           "--stuck-after", "0s")
    finally:
        held.release()
    assert result.code == 4 and "replay-outbox is already running: run other-run" in result.stderr
    with duckdb.connect(str(tmp_path / "chaos" / "state.duckdb"), read_only=True) as db:
        assert db.execute("select count(*) from billing.eo_outbox").fetchone()[0] == 3  # untouched


def test_execute_without_a_broker_is_refused_before_anything_is_read(tmp_path: Path) -> None:
    """The chaos sample reads topic archives and configures no broker: --execute says replay needs a
    live broker, exit 2, before an entry is read or the run logged (before: each entry skipped as
    poison, "no configured endpoint's input"). The plan needs none."""
    from eoctl.errors import ExitCode
    from tests.helpers.chaos import recorded_copy
    from tests.helpers.cli import run_eoctl

    chaos = recorded_copy(tmp_path)
    refused = run_eoctl("--config", str(chaos.config_path), "replay-outbox", "--execute")
    assert refused.code == ExitCode.USAGE
    assert refused.stderr.strip().splitlines()[-1].startswith(
        "eoctl: error: replay-outbox --execute sends the entries' messages through a live broker, and no "
        "[kafka.NAME] connection is configured (endpoints billing, shipping read topic archives)")
    assert store_rows(chaos, "select count(*) from information_schema.tables where table_name = 'eoctl_runs'") == [(0,)]
    plan = run_eoctl("--config", str(chaos.config_path), "--format", "json", "replay-outbox")
    assert plan.code == 0 and json.loads(plan.stdout)["planned"] > 0

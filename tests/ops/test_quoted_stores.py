"""Every command that changes things on stores whose configured names need quoting, on PostgreSQL
and MariaDB. replay-outbox over the real broker: the recorded chaos sample's tokens, outbox and intents in one set of shared tables of a
schema named `Eo Store`, the tables and every column renamed (mixed case, spaces, reserved words,
a `%s`, a double quote) and mapped in the configuration. `eoctl replay-outbox --execute` finishes
every stuck entry (tokens and intents made where none were committed, each message sent with its
token id, the incoming token removed, the entry deleted or, in an outbox that keeps sent rows,
marked sent) and a second run finds nothing. gc-tokens, gc-blobs and gc-outbox collect the sample's
garbage and sent rows past the retention, a second run changes nothing, and --restore puts every
table back as it was. Before: names were pasted into f-string SQL; every name now enters as a
quoted identifier and every value is bound."""

from __future__ import annotations

import datetime as dt
import json
import uuid
from pathlib import Path

import pytest

from tests.helpers.chaos import recorded_copy
from tests.helpers.cli import run_eoctl
from tests.helpers.pipeline_state import topic_records

pytestmark = pytest.mark.integration

ENDPOINTS = ("shop", "billing", "shipping")
SCHEMA = "Eo Store"
#: the sample's table -> (its name here, canonical column -> its name here, in the sample's column order)
TABLES = {
    "eo_tokens": ("Tokens", {"token_id": "Token Id", "message_id": "from", "destination": "To Endpoint",
                             "attempt_id": "attempt %s", "created_at": "Created At"}),
    "eo_outbox": ("Out Box", {"endpoint": "End Point", "incoming_message_id": "Incoming Message Id",
                              "incoming_token_id": "incoming Token", "attempt_id": "Attempt",
                              "outgoing": "select", "tokens_committed_at": "Committed At",
                              "created_at": "Created At", "updated_at": 'updated "at"', "version": "order"}),
    "eo_intents": ("Intent Log", {"intent_id": "Intent Id", "endpoint": "group",
                                  "incoming_message_id": "Incoming Message Id", "attempt_id": "Attempt Id",
                                  "kind": "Kind", "ref": "references", "created_at": "When"}),
}
KEYS = {"eo_tokens": ("token_id",), "eo_outbox": ("endpoint", "incoming_message_id"), "eo_intents": ("intent_id",)}
#: the column of an outbox that keeps sent rows, and the values that mean sent (bound, never pasted)
SENT_COLUMN, SENT_VALUES = "Sent? %s", ["sent", "done"]


def _types(kind: str) -> dict[str, str]:
    text, time = ("varchar(255)", "datetime(6)") if kind == "mariadb" else ("varchar", "timestamptz")
    return {"outgoing": "json" if kind == "mariadb" else "jsonb", "version": "bigint", "tokens_committed_at": time,
            "created_at": time, "updated_at": time, "_text": text}


class Target:
    """The test's store: a PostgreSQL database or the MariaDB server, quoting names as each does."""

    def __init__(self, kind: str, server) -> None:
        self.kind, self.server = kind, server
        if kind == "postgres":
            import psycopg

            self.database = f"quoted_{uuid.uuid4().hex[:8]}"
            with psycopg.connect(server.conninfo(), autocommit=True) as conn:
                conn.execute(f"create database {self.database}")
            self.conn = psycopg.connect(server.conninfo(dbname=self.database), autocommit=True)
            self.schema = SCHEMA
        else:
            self.conn = server.connect()
            self.conn.autocommit(True)
            self.schema = SCHEMA

    def q(self, name: str) -> str:
        """`name` quoted, its `%` doubled: every statement here is run with parameters (maybe none)."""
        name = name.replace("%", "%%")
        if self.kind == "mariadb":
            return "`" + name.replace("`", "``") + "`"
        return '"' + name.replace('"', '""') + '"'

    def table(self, name: str) -> str:
        return f"{self.q(self.schema)}.{self.q(name)}"

    def run(self, statement: str, params=()) -> list[tuple]:
        with self.conn.cursor() as cur:
            cur.execute(statement, tuple(params))
            return list(cur.fetchall()) if cur.description else []

    def close(self) -> None:
        self.conn.close()


def _load(target: Target, chaos, keeps_sent: bool) -> None:
    """The sample's protocol tables, every endpoint's rows in one table each, under the names of TABLES."""
    import duckdb

    types = _types(target.kind)
    if target.kind == "mariadb":
        target.run(f"drop database if exists {target.q(SCHEMA)}")
        target.run(f"create database {target.q(SCHEMA)}")
    else:
        target.run(f"create schema {target.q(SCHEMA)}")
    with duckdb.connect(chaos.store_target, read_only=True) as db:
        for sample, (name, columns) in TABLES.items():
            ddl = [f"{target.q(col)} {types.get(canonical, types['_text'])}"
                   + (" null" if canonical == "tokens_committed_at" else " not null")
                   for canonical, col in columns.items()]
            if sample == "eo_outbox" and keeps_sent:
                ddl.append(f"{target.q(SENT_COLUMN)} {types['_text']} null")
            ddl.append(f"primary key ({', '.join(target.q(columns[k]) for k in KEYS[sample])})")
            target.run(f"create table {target.table(name)} ({', '.join(ddl)})")
            rows = [r for ep in ENDPOINTS for r in db.execute(
                f"select {', '.join(columns)} from {ep}.{sample}").fetchall()]
            marks = ", ".join("%s" for _ in columns)
            for row in rows:
                values = [v.astimezone(dt.timezone.utc).replace(tzinfo=None)  # DATETIME holds UTC wall times
                          if target.kind == "mariadb" and isinstance(v, dt.datetime) else v for v in row]
                target.run(f"insert into {target.table(name)} ({', '.join(target.q(c) for c in columns.values())}) "
                           f"values ({marks})", values)


def _config(target: Target, folder: Path, bootstrap: str | None, topics: dict[str, str] | None,
            keeps_sent: bool) -> Path:
    """eoctl.toml mapping every table and column of TABLES; the inputs read this run's topics, or
    without `topics` the sample's archives (and billing's blobs: `folder` is the sample's copy)."""
    s = json.dumps  # a TOML basic string
    server = target.server
    if target.kind == "mariadb":
        store = (f'type = "mysql"\nport = {server.port}\ndatabase = {s(SCHEMA)}\nuser = "{server.user}"\n'
                 'password = "${EOCTL_TEST_PASSWORD}"\n')
    else:
        store = (f'type = "postgres"\nport = {server.port}\ndatabase = "{target.database}"\nuser = "{server.user}"\n'
                 f'password = "${{EOCTL_TEST_PASSWORD}}"\nschema = {s(SCHEMA)}\n')
    out = [f'[kafka.main]\nbootstrap_servers = "{bootstrap}"\n' if topics else "", f"[stores.shared]\n{store}"]
    inputs = {"billing": "orders", "shipping": "invoices"}
    for ep in ENDPOINTS:
        out.append(f'[endpoints.{ep}]\nstore = "shared"\n' + ('blobs = "blobs/billing"\n' if ep == "billing" and not topics
                                                              else ""))
        for sample, (name, columns) in TABLES.items():
            key = f"endpoints.{ep}.{sample.removeprefix('eo_')}"
            extra = ""
            if sample == "eo_outbox" and keeps_sent:
                extra = f"sent_column = {s(SENT_COLUMN)}\nsent_values = {s(SENT_VALUES)}\nretention = \"7d\"\n"
            out.append(f"[{key}]\ntable = {s(name)}\n{extra}\n[{key}.columns]\n"
                       + "".join(f"{canonical} = {s(col)}\n" for canonical, col in columns.items()))
        if ep in inputs and topics:
            out.append(f'[endpoints.{ep}.input]\ntopics = [{s(topics[inputs[ep]])}]\nkafka = "main"\n'
                       f'group = "quoted-{ep}"\n')
        elif ep in inputs:
            out.append(f'[endpoints.{ep}.input]\ntopics = [{s(inputs[ep])}]\narchive = "topics/{inputs[ep]}"\n')
    path = folder / "eoctl-quoted.toml"
    path.write_text("\n".join(out))
    return path


@pytest.mark.parametrize("keeps_sent", [False, True], ids=["deletes entries", "marks entries sent"])
@pytest.mark.parametrize("kind", ["postgres", "mariadb"])
def test_replay_finishes_every_stuck_entry_with_names_that_need_quoting(kafka, request, tmp_path: Path, kind: str,
                                                                      keeps_sent: bool) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    server = request.getfixturevalue(kind)
    chaos = recorded_copy(tmp_path)
    target = Target(kind, server)
    try:
        _load(target, chaos, keeps_sent)
        out_box, o = TABLES["eo_outbox"][0], TABLES["eo_outbox"][1]
        tokens, tk = TABLES["eo_tokens"][0], TABLES["eo_tokens"][1]
        intents, it = TABLES["eo_intents"][0], TABLES["eo_intents"][1]
        q, t = target.q, target.table
        stuck = {m: (ep, token, json.loads(text) if isinstance(text, str) else text)
                 for ep, m, token, text in target.run(
                     f"select {q(o['endpoint'])}, {q(o['incoming_message_id'])}, {q(o['incoming_token_id'])}, "
                     f"{q(o['outgoing'])} from {t(out_box)}")}
        assert len(stuck) == 4  # billing's three (one without committed tokens), shipping's one
        incoming = [token for _ep, token, _out in stuck.values()]
        held = f"select count(*) from {t(tokens)} where {q(tk['token_id'])} in ({', '.join(['%s'] * len(incoming))})"
        assert target.run(held, incoming) == [(2,)]  # billing's two; the others' were removed before
        if keeps_sent:  # a row sent already: never planned, never touched
            sent_id = str(uuid.uuid4())
            copied = ", ".join("%s" if c in ("incoming_message_id", "incoming_token_id") else q(col)
                               for c, col in o.items())
            target.run(f"insert into {t(out_box)} ({', '.join(q(c) for c in [*o.values(), SENT_COLUMN])}) "
                       f"select {copied}, %s from {t(out_box)} where {q(o['incoming_message_id'])} = %s",
                       [sent_id, str(uuid.uuid4()), SENT_VALUES[1], next(iter(stuck))])
        versions = dict(target.run(f"select {q(o['incoming_message_id'])}, {q(o['version'])} from {t(out_box)}"))
        # the outgoing messages go to this run's own topics, which the configured inputs read
        admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
        topics = {name: f"quoted-{kind}-{name}-{uuid.uuid4().hex[:8]}" for name in ("orders", "invoices")}
        for f in admin.create_topics([NewTopic(n, 1, 1) for n in topics.values()]).values():
            f.result(60)
        for recorded, name in (("rec-orders", topics["orders"]), ("rec-invoices", topics["invoices"])):
            target.run(f"update {t(out_box)} set {q(o['outgoing'])} = replace(cast({q(o['outgoing'])} as "
                       f"{'char' if kind == 'mariadb' else 'text'}), %s, %s)"
                       + ("" if kind == "mariadb" else "::jsonb"), [f'"topic": "{recorded}"', f'"topic": "{name}"'])
        path = _config(target, chaos.config_path.parent, kafka.bootstrap, topics, keeps_sent)
        env = {"EOCTL_TEST_PASSWORD": server.password}
        args = ("--config", str(path), "--format", "json", "replay-outbox", "--stuck-after", "0s")

        plan = run_eoctl(*args, env=env)
        assert plan.code == 0, plan.stdout[-3000:] + plan.stderr[-3000:]
        assert {e["entry_id"] for e in json.loads(plan.stdout)["entries"]} == set(stuck)

        done = run_eoctl(*args, "--execute", env=env)
        assert done.code == 0, done.stdout[-3000:] + done.stderr[-3000:]
        summary = json.loads(done.stdout)
        assert {e["entry_id"]: e["status"] for e in summary["entries"]} == {m: "replayed" for m in stuck}, summary
        created = sum(e["tokens_created"] for e in summary["entries"])
        assert created == 1  # billing's entry whose tokens were never committed: one message, one token

        # every entry finished: gone, or marked sent with its version moved on
        outbox_rows = (f"select {q(o['incoming_message_id'])}, {q(SENT_COLUMN) if keeps_sent else 'null'} "
                       f"from {t(out_box)}")
        left = target.run(outbox_rows)
        assert dict(left) == ({**{m: SENT_VALUES[0] for m in stuck}, sent_id: SENT_VALUES[1]} if keeps_sent else {})
        if keeps_sent:
            after = dict(target.run(f"select {q(o['incoming_message_id'])}, {q(o['version'])} from {t(out_box)}"))
            assert all(after[m] > versions[m] for m in stuck) and after[sent_id] == versions[sent_id]
        # the incoming tokens removed from their endpoint's tokens
        assert target.run(held, incoming) == [(0,)]
        # the new token: at the destination, registered as an intent of the sender, both marked replay's
        made = target.run(f"select {q(tk['token_id'])}, {q(tk['message_id'])}, {q(tk['destination'])} from {t(tokens)} "
                          f"where {q(tk['attempt_id'])} like 'eoctl-replay-%%'")
        assert len(made) == created and {d for _t, _m, d in made} == {"shipping"}
        registered = target.run(f"select {q(it['ref'])}, {q(it['endpoint'])}, {q(it['kind'])} from {t(intents)} "
                                f"where {q(it['attempt_id'])} like 'eoctl-replay-%%'")
        assert registered == [(made[0][0], "billing", "token")]
        # every message on the broker, carrying its committed token id (the new one where none was)
        committed = {m["message_id"]: m.get("token_id") for _ep, _token, out in stuck.values() for m in out}
        committed.update({message: token for token, message, _d in made})
        sent = {r.message_id: r.token_id for r in topic_records(kafka.bootstrap, topics["invoices"])}
        assert sent == committed and all(sent.values())

        again = run_eoctl(*args, "--execute", env=env)
        assert again.code == 0, again.stdout[-3000:] + again.stderr[-3000:]
        assert json.loads(again.stdout)["entries"] == []
        assert dict(target.run(outbox_rows)) == dict(left)
    finally:
        target.close()


@pytest.mark.parametrize("kind", ["postgres", "mariadb"])
def test_gc_collects_and_restores_with_names_that_need_quoting(request, tmp_path: Path, kind: str) -> None:
    server = request.getfixturevalue(kind)
    chaos = recorded_copy(tmp_path)
    target = Target(kind, server)
    try:
        _load(target, chaos, keeps_sent=True)
        out_box, o = TABLES["eo_outbox"]
        q, t = target.q, target.table
        # three entries sent 30 days ago (past the outbox's 7-day retention), copies of one under new ids
        old = dt.datetime.now(dt.timezone.utc) - dt.timedelta(days=30)
        first = target.run(f"select {q(o['incoming_message_id'])} from {t(out_box)}")[0][0]
        for _ in range(3):
            copied = ", ".join("%s" if c in ("incoming_message_id", "updated_at") else q(col) for c, col in o.items())
            target.run(f"insert into {t(out_box)} ({', '.join(q(c) for c in [*o.values(), SENT_COLUMN])}) "
                       f"select {copied}, %s from {t(out_box)} where {q(o['incoming_message_id'])} = %s",
                       [str(uuid.uuid4()), old.replace(tzinfo=None) if kind == "mariadb" else old, SENT_VALUES[1],
                        first])

        def state() -> dict[str, list[str]]:
            return {name: sorted(repr(row) for row in target.run(f"select * from {t(name)}"))
                    for name, _columns in TABLES.values()}

        def blobs() -> set[str]:
            return {str(p.relative_to(chaos.blobs)) for p in chaos.blobs.rglob("*") if p.is_file()}

        before, files = state(), blobs()
        path = _config(target, chaos.config_path.parent, None, None, keeps_sent=True)
        env = {"EOCTL_TEST_PASSWORD": server.password}
        base = ("--config", str(path), "--engine", "duckdb", "--format", "json")
        runs = {}
        for command, expected in (("gc-tokens", 1), ("gc-blobs", 1), ("gc-outbox", 3)):
            extra = () if command == "gc-outbox" else ("--grace", "0s")
            done = run_eoctl(*base, command, *extra, "--execute", env=env)
            assert done.code == 0, done.stdout[-3000:] + done.stderr[-3000:]
            result = json.loads(done.stdout)
            assert (result["planned"], result["deleted"]) == (expected, expected), (command, result)
            runs[command] = result["run_id"]
            again = json.loads(run_eoctl(*base, command, *extra, "--execute", env=env).stdout)
            assert again["deleted"] == 0, (command, again)
        after = state()
        assert len(after["Tokens"]) == len(before["Tokens"]) - 1
        assert len(after["Intent Log"]) == len(before["Intent Log"]) - 2  # the token's and the blob's
        assert len(after["Out Box"]) == len(before["Out Box"]) - 3
        assert len(blobs() - {f for f in blobs() if f.startswith(".eoctl-quarantine")}) == len(files) - 1
        for command, run_id in runs.items():
            restored = run_eoctl(*base, command, "--restore", run_id, "--execute", env=env)
            assert restored.code == 0, restored.stdout[-3000:] + restored.stderr[-3000:]
        assert state() == before and blobs() == files
    finally:
        target.close()

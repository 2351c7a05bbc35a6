"""The chaos pipeline for tests: the recorded sample, or a live run on the test broker with DuckDB
or PostgreSQL stores, and snapshots of what gc may change."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path

from eoctl.config import load_config
from eoctl.config.model import Config
from eoctl.options import AuditOptions
from tests.helpers.configs import write_config
from tests.helpers.servers import REPO

CHAOS = REPO / "samples" / "chaos"


def settled() -> AuditOptions:
    """No grace, no stuck threshold: everything left is old enough to count (now = audit time)."""
    return AuditOptions(grace=dt.timedelta(0), stuck_after=dt.timedelta(0))


def read_ledger(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@dataclass
class ChaosRun:
    config: Config
    config_path: Path
    environ: dict[str, str]
    ledger: list[dict]
    store_kind: str  # duckdb | postgres (samples.reference.store.Store.open arguments)
    store_target: str
    blobs: Path  # billing's blob prefix
    spec: object | None = None  # the RunSpec of a live run


def recorded_copy(tmp_path: Path) -> ChaosRun:
    """The recorded chaos sample copied to `tmp_path`, free to change."""
    folder = tmp_path / "chaos"
    shutil.copytree(CHAOS, folder, ignore=shutil.ignore_patterns("eoctl-history.duckdb*", "eoctl-history.records"))
    return ChaosRun(load_config(folder / "eoctl.toml"), folder / "eoctl.toml", {}, read_ledger(folder / "ledger.jsonl"),
                    "duckdb", str(folder / "state.duckdb"), folder / "blobs" / "billing")


def _stores(kind: str, target: str, postgres) -> str:
    from samples.reference.record import duckdb_stores

    if kind == "duckdb":
        return duckdb_stores(target)
    dbname = dict(kv.split("=", 1) for kv in target.split())["dbname"]
    return "\n".join(f'[stores.{schema}]\ntype = "postgres"\nport = {postgres.port}\ndatabase = "{dbname}"\n'
                     f'user = "{postgres.user}"\npassword = "${{EOCTL_TEST_PGPASSWORD}}"\nschema = "{schema}"\n'
                     for schema in ("shop", "billing", "shipping"))


def _live_input(prefix: str, topic: str, endpoint: str) -> str:
    return f'topics = ["{prefix}{topic}"]\nkafka = "main"\ngroup = "{prefix}{endpoint}"'


def live_run(kind: str, tmp_path: Path, kafka, postgres=None, orders: int = 40) -> ChaosRun:
    """Run the chaos pipeline on the test broker with `kind` stores; a config that reads it live."""
    from samples.reference.chaos import default_plan, run
    from samples.reference.record import chaos_config
    from samples.reference.spec import RunSpec

    if kind == "postgres":
        import psycopg

        name = f"chaos_{uuid.uuid4().hex[:8]}"
        with psycopg.connect(postgres.conninfo(), autocommit=True) as conn:
            conn.execute(f"create database {name}")
        target = postgres.conninfo(dbname=name)
    else:
        target = str(tmp_path / "state.duckdb")
    prefix = f"chaos-{kind}-{uuid.uuid4().hex[:6]}-"
    spec = RunSpec(kind, target, kafka.bootstrap, str(tmp_path), prefix, orders, default_plan())
    ledger, _ = run(spec)
    path = write_config(tmp_path, f'[kafka.main]\nbootstrap_servers = "{kafka.bootstrap}"\n\n' + chaos_config(
        stores=_stores(kind, target, postgres), blobs=f"{tmp_path}/blobs/billing",
        orders_input=_live_input(prefix, "orders", "billing"),
        invoices_input=_live_input(prefix, "invoices", "shipping")))
    environ = {"EOCTL_TEST_PGPASSWORD": postgres.password if postgres else ""}
    return ChaosRun(load_config(path, environ=environ), path, environ, ledger.entries, kind, target,
                    tmp_path / "blobs" / "billing", spec)


def store_rows(run: ChaosRun, sql: str, params: list | None = None) -> list[tuple]:
    """`sql` (`%s` placeholders for `params`) on the run's store: its rows, or [] for a statement."""
    from samples.reference.store import Store

    store = Store.open(run.store_kind, run.store_target)
    try:
        return store.q(sql, params or [])
    finally:
        store.close()


def id_text(value: object) -> object:
    """A UUID kept as its 16 bytes (a BINARY(16) id) as its text; any other value as it is."""
    if isinstance(value, (bytes, bytearray)) and len(value) == 16:
        return str(uuid.UUID(bytes=bytes(value)))
    return value


def snapshot(run: ChaosRun) -> dict[str, object]:
    """Every row of every token and intent table (all columns) and every file under the blob
    prefix (hidden ones too) with its sha256: what gc may change and --restore must put back."""
    from samples.reference.store import Store

    store = Store.open(run.store_kind, run.store_target)
    try:
        tables = {f"{ep}.{t}": sorted((tuple(id_text(v) for v in r) for r in store.q(f"select * from {ep}.{t}")),
                                      key=repr)
                  for ep in ("shop", "billing", "shipping") for t in ("eo_tokens", "eo_intents")}
    finally:
        store.close()
    files = {str(p.relative_to(run.blobs)): hashlib.sha256(p.read_bytes()).hexdigest()
             for p in sorted(run.blobs.rglob("*")) if p.is_file()}
    dirs = sorted(str(p.relative_to(run.blobs)) for p in run.blobs.rglob("*") if p.is_dir())
    return {"tables": tables, "files": files, "dirs": dirs}


def injected_garbage(chaos: ChaosRun) -> tuple[set[str], set[str]]:
    """(message ids of the garbage tokens, names of the garbage blobs) the ledger says were injected."""
    tokens = {m for e in chaos.ledger if "EO201" in e.get("expect", []) for m in e["outgoing"]}
    blobs = {f"{e['attempt_id']}.txt" for e in chaos.ledger if "EO401" in e.get("expect", [])}
    return tokens, blobs


def removed(before: dict, after: dict) -> tuple[set[tuple], set[str]]:
    """(table, row) pairs and blob files present in snapshot `before` and gone in `after`."""
    rows = {(table, row) for table, got in before["tables"].items() for row in got if row not in after["tables"][table]}
    files = set(before["files"]) - set(after["files"])
    return rows, files


def append_orders(folder: Path, name: str) -> int:
    """Append records to the `orders` archive as a new Parquet file, at offsets after the last:
    a redelivery of an old message with its old token (EO101 across the boundary), an old message
    under a new token (EO102), an old (producer, sequence) on a new message (EO103), and normal
    records. Returns how many."""
    import duckdb

    archive = folder / "topics" / "orders"
    src = f"read_parquet('{archive}/*.parquet')"
    db = duckdb.connect()
    db.execute(f"create table old as select * from {src}")
    ends = dict(db.execute('select "partition", max("offset") + 1 from old group by 1').fetchall())

    def header(k: str, v: str) -> str:
        return f"{{'key': '{k}', 'value': encode('{v}')}}"

    def with_header(key: str, value: str) -> str:
        return (f"list_transform(headers, lambda h: case when h.key = '{key}' then {header(key, value)} "
                "else h end)")

    def fresh(partition: int) -> str:  # a normal new message, also from a new producer
        mid = uuid.uuid4().hex
        return (f"select topic, {partition} as \"partition\", 0::bigint as \"offset\", now() as timestamp, "
                f"encode('{mid}') as key, encode('v') as value, [{header('eo-message-id', mid)}, "
                f"{header('eo-token-id', uuid.uuid4().hex)}, {header('eo-producer', 'late')}] as headers "
                "from old limit 1")

    parts = [
        "select * from old where \"partition\" = 0 and \"offset\" = 3",  # redelivered as it was
        f"select * replace ({with_header('eo-token-id', 'regenerated-token')} as headers) "
        "from old where \"partition\" = 1 and \"offset\" = 5",  # processed twice
        f"select * replace ({with_header('eo-message-id', 'another-message')} as headers) "
        "from old where \"partition\" = 0 and \"offset\" = 1",  # sequence reused
        fresh(0), fresh(1), fresh(1),
    ]
    db.execute("create table new as " + " union all ".join(f"({p})" for p in parts))
    first = " ".join(f'when "partition" = {p} then {e}' for p, e in ends.items())
    db.execute(f'create table numbered as select * replace ((case {first} end) + row_number() over '
               '(partition by "partition" order by key) - 1 as "offset", now() as timestamp) from new')
    db.execute(f"copy numbered to '{archive / name}' (format parquet)")
    return db.execute("select count(*) from numbered").fetchone()[0]


def state_names(config: Config, sinks: bool = True) -> set[str]:
    """The states a recorded audit of `config` keeps: eoctl.expr.incremental.STATES, and with
    `sinks` (the run read them) those of each sink with a watermark column."""
    from eoctl.expr import sink_states
    from eoctl.expr.incremental import EFFECT_HOURS, STATES

    names = set(STATES)
    for name, ep in config.endpoints.items():
        for sink in ep.sinks if sinks else ():
            if sink.watermark_column:
                names |= set(sink_states.state_names(name, sink))
                if sink.every_message:
                    names |= set(sink_states.effect_state_names(name, sink))
            if sink.every_message:
                names.add(EFFECT_HOURS)
    return names


def add_batch_entry(store: str, messages: int) -> tuple[str, str, list[dict]]:
    """A pending entry of billing holding `messages` outgoing messages (a batch job's), some with
    blobs and sequence numbers past the producer's (EO104's held gaps), two hours old, in the
    chaos store file `store`. Returns its incoming message id, its attempt id and its messages."""
    import datetime as dt
    import json
    import uuid

    import duckdb

    entry, attempt = str(uuid.uuid4()), str(uuid.uuid4())
    out = [{"message_id": str(uuid.uuid4()), "token_id": None, "topic": "rec-invoices", "destination": "shipping",
            "key": str(i), "value": "{}",
            "headers": {"eo-producer": "billing", "eo-sequence": str(1000 + i),
                        **({"eo-blobs": json.dumps([{"uri": f"batch-{i}.txt", "sha256": "0" * 64}])} if i % 7 == 0
                           else {})}} for i in range(messages)]
    at = dt.datetime.now(dt.timezone.utc) - dt.timedelta(hours=2)
    with duckdb.connect(store) as db:
        db.execute("insert into billing.eo_outbox values ('billing', ?, ?, ?, ?, null, ?, ?, 1)",
                   [entry, str(uuid.uuid4()), attempt, json.dumps(out), at, at])
    return entry, attempt, out

"""Benchmark: the gc-tokens plan over a token store of N tokens (default 1M), against the same
classification written as DuckDB SQL on the same files, side by side in one run.

    EOCTL_JARS_DIR=$PWD/.cache/jars/spark python bench/gc_bench.py --tokens 1000000 --work /tmp/gc-bench

The state (written with DuckDB SQL in seconds): 50% of the tokens are carried by records in flight
(live), 20% only by processed records (leaked), 15% by nothing and 3 days old (orphans: garbage),
5% by nothing and 1 hour old (young), 10% registered by an attempt that lost (intents in the
sender's store; the message's committed copy was sent) and 3 days old (garbage).
eoctl runs as a user runs it (a subprocess: Python driver plus Spark JVM, peak RSS over the tree).
The SQL runs twice: in this process with DuckDB already imported (the query alone), and as a
script from the command line (`--sql-only`: Python's start and `import duckdb` included, as for eoctl).
`--runs N` runs each command N times, alternated, and shows medians and the DuckDB plan's ratio to
the script (this 2-core machine's speed drifts by up to 50% between hours: compare in one run).

    python bench/gc_bench.py --tokens 1000000 --work /tmp/gc-bench --engines duckdb --runs 9
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))

from measure import run_measured  # noqa: E402

SHARES = {"live": 0.50, "leaked": 0.20, "orphan": 0.15, "young": 0.05, "lost": 0.10}


def generate(n: int, out: Path) -> dict[str, int]:
    """Write the state under `out`; returns the true count of each kind."""
    import shutil

    import duckdb

    shutil.rmtree(out, ignore_errors=True)
    (out / "topics" / "t").mkdir(parents=True)
    bounds, acc = [], 0.0
    for kind, share in SHARES.items():
        acc += share
        bounds.append((kind, acc))
    case = "case " + " ".join(f"when i < {int(b * n)} then '{k}'" for k, b in bounds) + " end"
    db = duckdb.connect(str(out / "state.duckdb"))
    db.execute(f"create temp table items as select i, {case} as kind, 'tok-' || i as token_id from range({n}) t(i)")
    for schema in ("src", "dst"):
        db.execute(f"create schema {schema}")
        db.execute(f"create table {schema}.eo_tokens (token_id varchar, message_id varchar, destination varchar, "
                   "attempt_id varchar, created_at timestamptz)")
        db.execute(f"create table {schema}.eo_outbox (endpoint varchar, incoming_message_id varchar, "
                   "incoming_token_id varchar, attempt_id varchar, outgoing json, tokens_committed_at timestamptz, "
                   "created_at timestamptz, updated_at timestamptz, version bigint)")
        db.execute(f"create table {schema}.eo_intents (intent_id varchar, endpoint varchar, incoming_message_id varchar, "
                   "attempt_id varchar, kind varchar, ref varchar, created_at timestamptz)")
    db.execute("""insert into dst.eo_tokens select token_id, 'msg-' || i, 'dst', 'a',
                  now() - case when kind = 'young' then interval 1 hour else interval 3 day end from items""")
    db.execute("""insert into src.eo_intents select 'int-' || i, 'src', 'in-' || i, 'a-lost', 'token', token_id,
                  now() - interval 3 day from items where kind = 'lost'""")
    # records: processed first (leaked tokens, then the committed copies of the lost attempts'
    # messages), then in flight (live tokens); one partition, committed offset between them
    db.execute("""create temp table recs as
        select row_number() over (order by grp, i) - 1 as "offset", grp < 2 as processed, mid, tok, causation from (
            select 0 as grp, i, 'msg-' || i as mid, token_id as tok, 'in-x' as causation from items where kind = 'leaked'
            union all select 1, i, 'sent-' || i, 'sent-tok-' || i, 'in-' || i from items where kind = 'lost'
            union all select 2, i, 'msg-' || i, token_id, 'in-x' from items where kind = 'live')""")
    committed = db.execute("select count(*) from recs where processed").fetchone()[0]
    h = "{'key': '%s', 'value': encode(%s)}"
    headers = ", ".join([h % ("eo-message-id", "mid"), h % ("eo-token-id", "tok"), h % ("eo-producer", "'src'"),
                         h % ("eo-causation-id", "causation")])
    db.execute(f"""copy (select 't' as topic, 0 as "partition", "offset", timestamp '2026-11-01' as "timestamp",
                       cast(null as blob) as "key", encode('{{}}') as "value", [{headers}] as headers from recs)
                   to '{out}/topics/t/part-0.parquet' (format parquet)""")
    truth = dict(db.execute("select kind, count(*) from items group by 1").fetchall())
    db.close()
    (out / "eoctl.toml").write_text(f"""
[stores.src]
type = "duckdb"
path = "state.duckdb"
schema = "src"

[stores.dst]
type = "duckdb"
path = "state.duckdb"
schema = "dst"

[endpoints.src]
store = "src"

[endpoints.dst]
store = "dst"

[endpoints.dst.input]
topics = ["t"]
archive = "topics/t"
committed_offsets = {{t = {{"0" = {committed}}}}}
""")
    return truth


def run_duckdb(out: Path) -> tuple[float, dict[str, int]]:
    """The same classes as DuckDB SQL over the same files, by the rules eoctl.expr.reconcile
    states: live (a record in flight carries it), referenced (a pending outbox entry holds it),
    leaked (only processed records carry it), garbage (every attempt that registered it lost: its
    incoming message's outcome is known without it, by a committed entry or a sent record; or
    older than the grace period), else young. Every endpoint's store is read, as eoctl reads them."""
    import duckdb

    start = time.monotonic()
    db = duckdb.connect()
    db.execute(f"attach '{out / 'state.duckdb'}' as st (read_only)")
    committed = int((out / "eoctl.toml").read_text().split('"0" = ')[1].split("}")[0])

    def header(key: str) -> str:
        return f"list_filter(headers, lambda x: x.key = '{key}')[1].value.decode()"

    db.execute(f"""create temp table r as select {header('eo-token-id')} as tok, {header('eo-producer')} as producer,
                   {header('eo-causation-id')} as causation, "offset" < {committed} as processed
                   from read_parquet('{out}/topics/t/*.parquet')""")
    both = "select '{s}' as ep, * from st.{s}.{t} union all select '{d}', * from st.{d}.{t}"
    row = db.execute(f"""
        with tokens as ({both.format(s='src', d='dst', t='eo_tokens')}),
        intents as (select * from ({both.format(s='src', d='dst', t='eo_intents')}) where kind = 'token'),
        outbox as ({both.format(s='src', d='dst', t='eo_outbox')}),
        carried as (select tok, bool_or(not processed) as in_flight, bool_or(processed) as on_processed
                    from r where tok is not null group by tok),
        held as (select distinct token_id from (
                    select unnest(from_json(outgoing, '[{{"token_id": "VARCHAR"}}]')).token_id as token_id from outbox
                    union all select incoming_token_id from outbox) where token_id is not null),
        keys as (select distinct ep as sender, incoming_message_id from intents),
        sent as (select distinct producer as sender, causation as incoming_message_id from r
                 where producer is not null and causation is not null),
        entries as (select ep as sender, incoming_message_id, bool_and(tokens_committed_at is not null) as done
                    from outbox group by all),
        known as (select k.sender, k.incoming_message_id,
                         coalesce(e.done, s.sender is not null) as outcome_known
                  from keys k left join sent s using (sender, incoming_message_id)
                  left join entries e using (sender, incoming_message_id)),
        lost as (select i.ref, bool_and(coalesce(k.outcome_known, false)) as lost
                 from intents i left join known k on k.sender = i.ep and k.incoming_message_id = i.incoming_message_id
                 group by i.ref),
        c as (select case when c.in_flight then 'live' when h.token_id is not null then 'referenced'
                          when c.on_processed then 'leaked'
                          when coalesce(l.lost, false) or t.created_at < now() - interval 24 hour then 'garbage'
                          else 'young' end as cls
              from tokens t left join carried c on c.tok = t.token_id left join held h on h.token_id = t.token_id
              left join lost l on l.ref = t.token_id
              where t.ep = 'dst')
        select count(*) filter (cls = 'live'), count(*) filter (cls = 'leaked'),
               count(*) filter (cls = 'garbage'), count(*) filter (cls = 'young'),
               count(*) filter (cls = 'referenced') from c""").fetchone()
    return time.monotonic() - start, dict(zip(("live", "leaked", "garbage", "young", "referenced"), row))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=1_000_000)
    parser.add_argument("--work", type=Path, default=Path("/tmp/eoctl-gc-bench"))
    parser.add_argument("--jars", default=os.environ.get("EOCTL_JARS_DIR"))
    parser.add_argument("--engines", default="duckdb,spark")
    parser.add_argument("--sql-only", action="store_true", help="run only the SQL on --work's state; print its counts")
    parser.add_argument("--runs", type=int, default=1,
                        help="runs of each command, alternated; medians shown (a noisy machine: 9 or more)")
    args = parser.parse_args()
    if args.sql_only:
        print(json.dumps(run_duckdb(args.work)[1]))
        return 0

    start = time.monotonic()
    truth = generate(args.tokens, args.work)
    print(f"generated {args.tokens} tokens in {time.monotonic() - start:.1f} s: {truth}")
    expected = {"live": truth["live"], "leaked": truth["leaked"], "garbage": truth["orphan"] + truth["lost"],
                "young": truth["young"], "referenced": 0}

    env = {**os.environ, **({"EOCTL_JARS_DIR": args.jars} if args.jars else {})}
    commands = {f"eoctl --engine {engine} gc-tokens plan":
                [sys.executable, "-m", "eoctl", "--config", str(args.work / "eoctl.toml"), "--engine", engine,
                 "--format", "json", "gc-tokens", "--max-deletes", str(args.tokens)]
                for engine in args.engines.split(",")}
    script = "DuckDB SQL as a script (command line)"
    commands[script] = [sys.executable, str(Path(__file__).resolve()), "--sql-only", "--work", str(args.work)]
    runs: dict[str, list[tuple[float, int, bool]]] = {name: [] for name in commands}
    for _ in range(args.runs):  # alternated: a machine's speed drifts between runs
        for name, cmd in commands.items():
            wall, rss, code, stdout, stderr = run_measured(cmd, env, REPO)
            if code != 0:
                raise RuntimeError(f"{name} failed ({code}): {stderr[-2000:]}")
            if name == script:
                ok = json.loads(stdout) == expected
            else:
                plan = json.loads(stdout)
                ok = (plan["garbage"], plan["planned"]) == (expected["garbage"], expected["garbage"])
            runs[name].append((wall, rss, ok))
    rows = [(name, statistics.median(w for w, _, _ in r), max(m for _, m, _ in r), all(ok for *_, ok in r))
            for name, r in runs.items()]
    d_time, d_counts = run_duckdb(args.work)
    import resource

    d_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    rows.append(("DuckDB SQL in this process (query only)", d_time, d_rss, d_counts == expected))
    print(f"\n{args.tokens:,} tokens, {os.cpu_count()} cores, " + ("1 run" if args.runs == 1 else
          f"medians of {args.runs} alternated runs") + " (peak RSS: the highest)")
    print(f"{'contender':44} {'wall s':>8} {'peak RSS MiB':>13} {'matches truth':>14}")
    for name, wall, rss, ok in rows:
        print(f"{name:44} {wall:8.2f} {rss / 2**20:13.0f} {str(ok):>14}")
    if args.runs > 1:
        print("\nevery run's wall s, in order:")
        for name, r in runs.items():
            print(f"  {name:44} {' '.join(f'{w:.2f}' for w, _, _ in r)}")
    duckdb_plan = "eoctl --engine duckdb gc-tokens plan"
    if duckdb_plan in runs:
        ratios = [e[0] / s[0] for e, s in zip(runs[duckdb_plan], runs[script])]
        print(f"\nthe DuckDB plan against the script: {statistics.median(ratios):.2f}x (median of "
              f"{len(ratios)} alternated pairs' ratios)")
    return 0 if all(ok for *_, ok in rows) else 1

if __name__ == "__main__":
    sys.exit(main())

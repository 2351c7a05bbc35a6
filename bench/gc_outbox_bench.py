"""Benchmark: the gc-outbox plan over an outbox that keeps N sent rows (default 1M), against the same
counts written as DuckDB SQL on the same file, side by side in one run.

    python bench/gc_outbox_bench.py --rows 1000000 --work /tmp/gc-outbox-bench --runs 5

The state (DuckDB SQL, seconds): one endpoint's outbox of N sent rows (`sent_at` set), 60% last
updated 10 days ago (past the 7-day retention: planned), 40% an hour ago (kept), plus 1% pending
rows (never planned). eoctl runs as a user runs it (a subprocess; peak RSS over its tree); the SQL
runs as a script from the command line (`--sql-only`: Python's start and `import duckdb` included,
as for eoctl) and in this process (the query alone). `--execute N` also times an execution that
deletes N rows (journaled, in batches of 1,000) on a copy, against one plain `DELETE` of as many
rows on another copy.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))

from measure import run_measured  # noqa: E402

PAST_SHARE = 0.6


def generate(n: int, out: Path) -> dict[str, int]:
    import duckdb

    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    now = dt.datetime.now(dt.timezone.utc)
    past, young = now - dt.timedelta(days=10), now - dt.timedelta(hours=1)
    pending = max(n // 100, 1)
    with duckdb.connect(str(out / "state.duckdb")) as db:
        db.execute("create schema billing")
        db.execute("create table billing.eo_outbox (endpoint varchar not null, incoming_message_id varchar not null, "
                   "incoming_token_id varchar, attempt_id varchar, outgoing json, tokens_committed_at timestamptz, "
                   "created_at timestamptz, updated_at timestamptz, version bigint, sent_at timestamptz, "
                   "primary key (endpoint, incoming_message_id))")
        cut = int(n * PAST_SHARE)
        db.execute(f"""insert into billing.eo_outbox select 'billing', 'm-' || lpad(i::varchar, 10, '0'), 'tok-' || i,
            'att-' || i, '[]', t, t - interval 1 second, t, 2, t
            from (select i, case when i < {cut} then timestamptz '{past.isoformat()}'
                                 else timestamptz '{young.isoformat()}' end as t from range({n}) r(i))""")
        db.execute(f"""insert into billing.eo_outbox select 'billing', 'p-' || i, 'ptok-' || i, 'patt-' || i, '[]',
            null, timestamptz '{past.isoformat()}', timestamptz '{past.isoformat()}', 1, null from range({pending}) r(i)""")
    (out / "eoctl.toml").write_text('[stores.billing]\ntype = "duckdb"\npath = "state.duckdb"\nschema = "billing"\n\n'
                                    '[endpoints.billing]\nstore = "billing"\n\n[endpoints.billing.outbox]\n'
                                    'sent_column = "sent_at"\nretention = "7d"\n')
    return {"sent": n, "planned": cut}


def run_duckdb(work: Path) -> tuple[float, dict[str, int]]:
    """The plan's counts as one DuckDB query: sent rows, and those past the retention."""
    import duckdb

    start = time.monotonic()
    with duckdb.connect(str(work / "state.duckdb"), read_only=True) as db:
        sent, planned = db.execute(
            "select count(*), count(*) filter (where updated_at < now() - interval 7 days) "
            "from billing.eo_outbox where sent_at is not null").fetchone()
    return time.monotonic() - start, {"sent": sent, "planned": planned}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--work", type=Path, default=Path("/tmp/eoctl-gc-outbox-bench"))
    parser.add_argument("--runs", type=int, default=1, help="runs of each command, alternated; medians shown")
    parser.add_argument("--execute", type=int, default=0, metavar="N", help="also time deleting N rows")
    parser.add_argument("--sql-only", action="store_true", help="run only the SQL on --work's state; print its counts")
    args = parser.parse_args()
    if args.sql_only:
        print(json.dumps(run_duckdb(args.work)[1]))
        return 0
    start = time.monotonic()
    truth = generate(args.rows, args.work)
    print(f"generated {args.rows:,} sent rows in {time.monotonic() - start:.1f} s: {truth}")
    env = dict(os.environ)
    plan = "eoctl gc-outbox plan"
    script = "DuckDB SQL as a script (command line)"
    commands = {plan: [sys.executable, "-m", "eoctl", "--config", str(args.work / "eoctl.toml"), "--format", "json",
                       "gc-outbox", "--max-deletes", str(args.rows)],
                script: [sys.executable, str(Path(__file__).resolve()), "--sql-only", "--work", str(args.work)]}
    runs: dict[str, list[tuple[float, int, bool]]] = {name: [] for name in commands}
    for _ in range(args.runs):
        for name, cmd in commands.items():
            wall, rss, code, stdout, stderr = run_measured(cmd, env, REPO)
            if code != 0:
                raise RuntimeError(f"{name} failed ({code}): {stderr[-2000:]}")
            out = json.loads(stdout)
            ok = (out["garbage"], out["planned"]) == (truth["sent"], truth["planned"]) if name == plan else out == truth
            runs[name].append((wall, rss, ok))
    rows = [(name, statistics.median(w for w, _, _ in r), max(m for _, m, _ in r), all(ok for *_, ok in r))
            for name, r in runs.items()]
    d_time, d_counts = run_duckdb(args.work)
    import resource

    rows.append(("DuckDB SQL in this process (query only)", d_time,
                 resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, d_counts == truth))
    if args.execute:
        rows += _executions(args, env)
    print(f"\n{args.rows:,} sent rows, {os.cpu_count()} cores, " + ("1 run" if args.runs == 1 else
          f"medians of {args.runs} alternated runs") + " (peak RSS: the highest)")
    print(f"{'contender':48} {'wall s':>8} {'peak RSS MiB':>13} {'matches truth':>14}")
    for name, wall, rss, ok in rows:
        print(f"{name:48} {wall:8.2f} {rss / 2**20:13.0f} {str(ok):>14}")
    ratios = [e[0] / s[0] for e, s in zip(runs[plan], runs[script])]
    print(f"\nthe plan against the script: {statistics.median(ratios):.2f}x (median of {len(ratios)} pairs)")
    return 0 if all(ok for *_, ok in rows) else 1


def _executions(args, env) -> list[tuple[str, float, int, bool]]:
    """gc-outbox --execute of N rows on one copy; one plain DELETE of N rows on another."""
    import duckdb

    n = args.execute
    eoctl_copy, sql_copy = args.work.parent / (args.work.name + "-exec"), args.work.parent / (args.work.name + "-sql")
    for copy in (eoctl_copy, sql_copy):
        shutil.rmtree(copy, ignore_errors=True)
        shutil.copytree(args.work, copy)
    wall, rss, code, stdout, stderr = run_measured(
        [sys.executable, "-m", "eoctl", "--config", str(eoctl_copy / "eoctl.toml"), "--format", "json", "gc-outbox",
         "--execute", "--max-deletes", str(n), "--batch-size", "1000"], env, REPO)
    if code != 0:
        raise RuntimeError(f"gc-outbox --execute failed ({code}): {stderr[-2000:]}")
    deleted = json.loads(stdout)["deleted"]
    start = time.monotonic()
    with duckdb.connect(str(sql_copy / "state.duckdb")) as db:
        gone = db.execute(f"delete from billing.eo_outbox where incoming_message_id in (select incoming_message_id "
                          f"from billing.eo_outbox where sent_at is not null and updated_at < now() - interval 7 days "
                          f"order by incoming_message_id limit {n})").fetchone()[0]
    sql_wall = time.monotonic() - start
    return [(f"eoctl gc-outbox --execute ({n:,} rows, journaled)", wall, rss, deleted == n),
            (f"one DELETE of {n:,} rows, no journal (in process)", sql_wall, 0, gone == n)]


if __name__ == "__main__":
    raise SystemExit(main())

"""The topic checks written once (eoctl.expr.topics: EO101-EO103, EO105), on each engine, over the
same generated state: wall time of the whole job (reading the archive, building the working copy,
every check), each engine in a subprocess of its own so that its peak RSS is its own; counts are
compared with the generator's ground truth.

    EOCTL_JARS_DIR=$PWD/.cache/jars/spark python bench/engines_bench.py --records 1000000 --work /tmp/bench-engines
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.measure import run_measured

CODES = ("EO101", "EO102", "EO103", "EO105")


def job(engine: str, config_path: str) -> None:
    """One engine's run, in this process: prints {code: count} as JSON."""
    from eoctl.config import load_config
    from eoctl.expr import Dialect, compile_sql
    from eoctl.expr.records import records_table
    from eoctl.expr.topics import CHECKS

    config = load_config(Path(config_path))
    counts = {}
    if engine == "duckdb":
        from eoctl.engine.duckdb import build_working_copy, connect

        con = connect()
        build_working_copy(con, config)
        for code in CODES:
            sql = compile_sql(CHECKS[code](records_table()), Dialect.duckdb)
            counts[code] = con.execute(f"SELECT count(*) FROM ({sql})").fetchone()[0]
    else:  # Spark: eoctl's working copy as a temporary view, the same expressions in Spark SQL
        from eoctl.checks.context import AuditContext
        from eoctl.config.model import EngineConfig
        from eoctl.engine import start_session
        from tests.helpers.chaos import settled

        spark = start_session(EngineConfig(master="local[*]", jars_dir=os.environ.get("EOCTL_JARS_DIR")))
        ctx = AuditContext(spark, config, settled())
        try:
            ctx.records.createOrReplaceTempView("records")
            for code in CODES:
                counts[code] = spark.sql(compile_sql(CHECKS[code](records_table()), Dialect.spark)).count()
        finally:
            ctx.release()
    print(json.dumps(counts))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--work", type=Path, default=Path("/tmp/eoctl-bench-engines"))
    ap.add_argument("--job", nargs=2, metavar=("ENGINE", "CONFIG"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.job:
        job(*args.job)
        return 0
    from samples.generator import GenSpec, generate

    state = args.work / f"state-{args.records}"
    truth_file = state / "ground_truth.json"
    if not truth_file.exists():
        t0 = time.monotonic()
        generate(GenSpec(args.records, state))
        print(f"generated {args.records} records in {time.monotonic() - t0:.1f}s", file=sys.stderr)
    truth = json.loads(truth_file.read_text())
    want = {code: truth["codes"][code]["count"] for code in CODES}
    print("| records | engine | wall s | peak RSS MiB | counts match truth |\n|---:|---|---:|---:|---|")
    for engine in ("duckdb", "spark"):
        wall, peak, code, out, err = run_measured(
            [sys.executable, __file__, "--job", engine, str(state / "eoctl.toml")], dict(os.environ), Path.cwd())
        if code != 0:
            print(err[-3000:], file=sys.stderr)
            return 1
        got = json.loads(out.strip().splitlines()[-1])
        print(f"| {truth['records']:,} | {engine} | {wall:.1f} | {peak / 2**20:.0f} | "
              f"{'yes' if got == want else f'no: {got} vs {want}'} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The full audit on each engine, from the command line, over the same generated state: wall time
and peak RSS of `eoctl --engine E audit` (every check of the catalog: reading the archive, the
store tables, the blob prefix and the sink, every check, the report), each in a process of its
own; the counts per code are compared with the generator's ground truth.

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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--work", type=Path, default=Path("/tmp/eoctl-bench-engines"))
    ap.add_argument("--engines", default="duckdb,spark")
    args = ap.parse_args()
    from samples.generator import GenSpec, generate

    state = args.work / f"state-{args.records}"
    truth_file = state / "ground_truth.json"
    if not truth_file.exists():
        t0 = time.monotonic()
        generate(GenSpec(args.records, state))
        print(f"generated {args.records} records in {time.monotonic() - t0:.1f}s", file=sys.stderr)
    truth = json.loads(truth_file.read_text())
    want = {code: v["count"] for code, v in truth["codes"].items() if v["count"]}
    print("| records | engine | wall s | peak RSS MiB | counts match truth |\n|---:|---|---:|---:|---|")
    for engine in args.engines.split(","):
        cmd = [sys.executable, "-m", "eoctl", "--config", str(state / "eoctl.toml"), "--engine", engine,
               "--format", "json", "audit", "--grace", "0s", "--stuck-after", "0s", "--no-record"]
        wall, peak, code, out, err = run_measured(cmd, dict(os.environ), Path.cwd())
        if code not in (0, 1):
            print(err[-3000:], file=sys.stderr)
            return 1
        got = {c: s["count"] for c, s in json.loads(out)["summary"].items()}
        print(f"| {truth['records']:,} | {engine} | {wall:.1f} | {peak / 2**20:.0f} | "
              f"{'yes' if got == want else f'no: {got} vs {want}'} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Benchmark: one `eoctl audit` from two commits, alternated on one generated state: a commit given
as --base (checked out in a temporary git worktree) and this checkout. Each run's wall time and
peak RSS side by side, then each side's median: how "no slower than before" is shown where two
runs of one commit differ by a few percent (a slower minute of the machine shows on both sides).

    EOCTL_JARS_DIR=$PWD/.cache/jars/spark python bench/ab_bench.py --base 36af284 --records 10000000 --runs 3

The audit is audit_bench.py's (its checks, evidence rows, fail-on), run as a user runs it from each
tree (`python -m eoctl` with the tree as the working directory, so its own package is imported).
Both sides must find the generated state's ground truth, or the figures mean nothing.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from audit_bench import CODES, run_eoctl  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", required=True, help="the commit to compare this checkout with")
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--runs", type=int, default=3, help="runs of each side, alternated (base first)")
    ap.add_argument("--engine", default="spark", choices=["spark", "duckdb"])
    ap.add_argument("--work", type=Path, default=Path("/tmp/eoctl-ab-bench"))
    ap.add_argument("--jars", default=os.environ.get("EOCTL_JARS_DIR"), help="EOCTL_JARS_DIR for eoctl")
    ap.add_argument("--memory-limit", help="[engine] memory_limit for the DuckDB engine (e.g. 1.5GB), both sides")
    args = ap.parse_args()

    from samples.generator import GenSpec, generate

    base = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", args.base], check=True,
                          capture_output=True, text=True).stdout.strip()
    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], check=True,
                          capture_output=True, text=True).stdout.strip()
    out = args.work / f"state-{args.records}"
    started = time.monotonic()
    truth = generate(GenSpec(args.records, out))
    print(f"generated {truth['records']} records in {time.monotonic() - started:.1f} s", flush=True)
    expected = {c: v["count"] for c, v in truth["codes"].items() if c in CODES and v["count"]}
    if args.memory_limit:
        config = out / "eoctl.toml"
        config.write_text(config.read_text() + f'\n[engine]\nmemory_limit = "{args.memory_limit}"\n')

    with tempfile.TemporaryDirectory(prefix="eoctl-ab-") as tmp:
        worktree = Path(tmp) / base
        subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", "--quiet", str(worktree), base],
                       check=True)
        try:
            sides = {f"{base} (--base)": worktree, f"{head} (this checkout)": REPO}
            runs: dict[str, list[tuple[float, int, bool]]] = {name: [] for name in sides}
            for n in range(args.runs):
                for name, tree in sides.items():
                    wall, rss, counts = run_eoctl(out / "eoctl.toml", args.jars, args.engine, tree)
                    runs[name].append((wall, rss, counts == expected))
                    print(f"run {n + 1}, {name}: {wall:.1f} s, {rss / 2**20:.0f} MiB, "
                          f"matches truth {counts == expected}", flush=True)
        finally:
            subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(worktree)], check=False)

    limit = f", memory_limit {args.memory_limit}" if args.memory_limit else ""
    print(f"\n{truth['records']:,} records, {os.cpu_count()} cores, eoctl audit --engine {args.engine}{limit}, "
          f"checks {', '.join(CODES)}")
    print(f"{'side':28} {'runs, wall s':>28} {'median s':>9} {'peak RSS MiB':>13} {'matches truth':>14}")
    for name, rows in runs.items():
        walls = ", ".join(f"{w:.1f}" for w, _, _ in rows)
        print(f"{name:28} {walls:>28} {statistics.median(w for w, _, _ in rows):9.1f} "
              f"{max(r for _, r, _ in rows) / 2**20:13.0f} {str(all(ok for *_, ok in rows)):>14}")
    (base_runs, head_runs) = runs.values()
    ratio = statistics.median(w for w, _, _ in head_runs) / statistics.median(w for w, _, _ in base_runs)
    print(f"ratio of medians, this checkout / --base: {ratio:.3f}")
    return 0 if all(ok for rows in runs.values() for *_, ok in rows) else 1


if __name__ == "__main__":
    sys.exit(main())

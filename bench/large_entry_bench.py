"""Benchmark: `eoctl audit` over the chaos sample plus one pending outbox entry holding a batch of
`--messages` outgoing messages (a batch job's entry), from two commits alternated: a commit given as
--base (checked out in a temporary git worktree; before the entry's messages were kept once per
run, each check that reads them parsed the JSON again) and this checkout. Each run's wall time and
peak RSS side by side; both sides must give the same findings (codes, counts, evidence but its ages).
With --signal-after, each side's audit also gets a SIGTERM that long after its start: the seconds
until it is gone (d24e349 cast the entry's JSON in one piece, which no signal stops; this checkout
reads an entry that large by DuckDB's streaming JSON reader). With --trace, `eoctl trace` of one of
the entry's messages and of its incoming message instead (their verdicts and finding codes compared).

    python bench/large_entry_bench.py --base d60a9d9 --messages 1000000 --engine duckdb
    python bench/large_entry_bench.py --base d24e349 --messages 1000000 --signal-after 5
    python bench/large_entry_bench.py --base ed2e997 --messages 1000000 --trace

Each side runs as a user runs it (`python -m eoctl` with the tree as the working directory).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))

from measure import run_measured  # noqa: E402


def make_state(folder: Path, messages: int) -> tuple[int, str, str]:
    """The chaos sample copied to `folder` with a pending entry of billing holding `messages`
    outgoing messages, two hours old; returns the entry's JSON bytes, its incoming message id and
    the id of its middle message."""
    import duckdb

    shutil.rmtree(folder, ignore_errors=True)
    shutil.copytree(REPO / "samples" / "chaos", folder,
                    ignore=shutil.ignore_patterns("eoctl-history.duckdb*", "eoctl-history.records"))
    out = [{"message_id": str(uuid.uuid4()), "token_id": None, "topic": "rec-invoices", "destination": "shipping",
            "key": str(i), "value": "{}", "headers": {"eo-producer": "billing", "eo-sequence": str(100_000 + i)}}
           for i in range(messages)]
    text = json.dumps(out)
    at = dt.datetime.now(dt.timezone.utc) - dt.timedelta(hours=2)
    entry = str(uuid.uuid4())
    with duckdb.connect(str(folder / "state.duckdb")) as db:
        db.execute("insert into billing.eo_outbox values ('billing', ?, ?, ?, ?, null, ?, ?, 1)",
                   [entry, str(uuid.uuid4()), str(uuid.uuid4()), text, at, at])
    return len(text), entry, out[messages // 2]["message_id"]


def audit(config: Path, engine: str, tree: Path, jars: str | None) -> tuple[float, int, list]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    if jars:
        env["EOCTL_JARS_DIR"] = jars
    wall, rss, code, stdout, stderr = run_measured(
        [sys.executable, "-m", "eoctl", "--engine", engine, "--config", str(config), "--format", "json", "audit",
         "--no-record"], env, tree)
    if code not in (0, 1):
        raise SystemExit(f"audit failed (exit {code}): {stderr[-2000:]}")
    # the evidence but its ages, which follow the moment each run started
    found = sorted((f["code"], f["endpoint"], f["count"],
                    json.dumps([{k: v for k, v in row.items() if not k.endswith("age_seconds")} for row in f["evidence"]],
                               sort_keys=True))
                   for f in json.loads(stdout)["findings"])
    return wall, rss, found


def trace(config: Path, engine: str, tree: Path, jars: str | None, message_id: str) -> tuple[float, int, list]:
    """`eoctl trace MESSAGE_ID`: wall time, peak RSS and its answer (verdict and finding codes)."""
    env = {**os.environ, "PYTHONPATH": str(tree), **({"EOCTL_JARS_DIR": jars} if jars else {})}
    wall, rss, code, stdout, stderr = run_measured(
        [sys.executable, "-m", "eoctl", "--engine", engine, "--config", str(config), "--format", "json", "trace",
         message_id], env, tree)
    if code not in (0, 1, 5):
        raise SystemExit(f"trace failed (exit {code}): {stderr[-2000:]}")
    return wall, rss, [(m["verdict"], sorted(f["code"] for f in m["findings"])) for m in json.loads(stdout)["messages"]]


def stop_time(config: Path, engine: str, tree: Path, jars: str | None, after: float) -> tuple[float, int]:
    """Seconds from a SIGTERM sent `after` seconds into an audit until the process is gone, and its
    exit code (143: it stopped and said so)."""
    import signal
    import time

    env = {**os.environ, "PYTHONPATH": str(tree), **({"EOCTL_JARS_DIR": jars} if jars else {})}
    proc = subprocess.Popen([sys.executable, "-m", "eoctl", "--engine", engine, "--config", str(config), "--format",
                             "json", "audit", "--no-record"], env=env, cwd=tree, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    time.sleep(after)
    sent = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    code = proc.wait()
    return time.monotonic() - sent, code


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", required=True, help="the commit to compare this checkout with")
    ap.add_argument("--messages", type=int, default=200_000)
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--engine", default="duckdb", choices=["spark", "duckdb"])
    ap.add_argument("--work", type=Path, default=Path("/tmp/eoctl-large-entry-bench"))
    ap.add_argument("--jars", default=os.environ.get("EOCTL_JARS_DIR"), help="EOCTL_JARS_DIR for eoctl")
    ap.add_argument("--trace", action="store_true",
                    help="time `eoctl trace` of the entry's middle message and of the entry's own incoming "
                         "message instead of the audit")
    ap.add_argument("--signal-after", type=float, default=None, metavar="SECONDS",
                    help="also send each side's audit a SIGTERM this long after its start, and time the stop")
    args = ap.parse_args()

    size, entry, middle = make_state(args.work / "chaos", args.messages)
    config = args.work / "chaos" / "eoctl.toml"
    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], check=True,
                          capture_output=True, text=True).stdout.strip()
    with tempfile.TemporaryDirectory(prefix="eoctl-large-entry-") as tmp:
        worktree = Path(tmp) / args.base
        subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", "--quiet", str(worktree), args.base],
                       check=True)
        try:
            sides = {f"{args.base} (--base)": worktree, f"{head} (this checkout)": REPO}
            results: dict[str, list[tuple[float, int]]] = {} if args.trace else {name: [] for name in sides}
            findings = {}
            for n in range(args.runs):
                for name, tree in sides.items():
                    if args.trace:
                        for label, message_id in (("a message it holds", middle), ("its incoming message", entry)):
                            wall, rss, found = trace(config, args.engine, tree, args.jars, message_id)
                            results.setdefault(f"{name}, trace of {label}", []).append((wall, rss))
                            findings[f"{name}, {label}"] = found
                            print(f"run {n + 1}, {name}, trace of {label}: {wall:.1f} s, {rss / 2**20:.0f} MiB, "
                                  f"{found}", flush=True)
                        continue
                    wall, rss, found = audit(config, args.engine, tree, args.jars)
                    results[name].append((wall, rss))
                    findings[name] = found
                    print(f"run {n + 1}, {name}: {wall:.1f} s, {rss / 2**20:.0f} MiB", flush=True)
            stops = {}
            if args.signal_after is not None:
                for name, tree in sides.items():
                    stops[name] = stop_time(config, args.engine, tree, args.jars, args.signal_after)
                    print(f"SIGTERM at {args.signal_after:g} s, {name}: gone {stops[name][0]:.1f} s later, "
                          f"exit {stops[name][1]}", flush=True)
        finally:
            subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(worktree)], check=False)
    # the same answers on both sides (trace: per message; the base's verdicts may be older answers)
    same = (len({json.dumps(f) for f in findings.values()}) == 1 if not args.trace else
            all(findings[f"{a}, {label}"][0][1] == findings[f"{b}, {label}"][0][1]
                for a, b in [tuple(sides)] for label in ("a message it holds", "its incoming message")))
    print(f"\nchaos sample + one pending entry of {args.messages:,} messages ({size / 1e6:.0f} MB of JSON), "
          f"{os.cpu_count()} cores, eoctl {'trace' if args.trace else 'audit'} --engine {args.engine}; the same findings on both sides: {same}")
    for name, rows in results.items():
        stopped = (f"   SIGTERM at {args.signal_after:g} s: gone {stops[name][0]:.1f} s later (exit {stops[name][1]})"
                   if name in stops else "")
        print(f"{name:60} wall s {', '.join(f'{w:.1f}' for w, _ in rows):>20}   peak RSS MiB "
              f"{max(r for _, r in rows) / 2**20:.0f}{stopped}")
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())

"""The chaos pipeline: place orders, run the endpoints, kill them where the plan says, restart
them until everything is processed, and leave the ledger of what went wrong.

    python -m samples.reference.chaos --bootstrap 127.0.0.1:9092 --out /tmp/run [--store duckdb|postgres]
        [--postgres CONNINFO] [--orders 40] [--no-faults | --only ghost,stuck] [--prefix run1-]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

from samples.reference.endpoint import Dispatcher, Shop
from samples.reference.faults import FAULT_KINDS, STEPS, Fault, Injector, Ledger
from samples.reference.spec import RunSpec
from samples.reference.store import Store

MAX_RESTARTS = 100
REPO = Path(__file__).resolve().parents[2]  # `samples` is imported from the repository root


def default_plan(kinds: set[str] | None = None) -> dict[int, Fault]:
    """One order per fault: every crash step of billing and shipping and every other fault kind
    (only the fault kinds in `kinds`, when given)."""
    faults = [Fault("crash", "billing", step) for step in STEPS]
    faults += [Fault("crash", "shipping", step) for step in STEPS if step not in ("tokens_created", "tokens_committed")]
    faults += [
        Fault("crash_no_cleanup", "billing", "prepared"),
        Fault("crash_no_cleanup", "billing", "tokens_created"),
        Fault("duplicate_delivery", "shop"),
        Fault("lost_ack", "shop"),
        Fault("regenerate_tokens", "billing"),
        Fault("ghost", "billing"),
        Fault("shared_blob_name", "billing"),
        Fault("stuck", "billing", "entry_persisted"),
        Fault("stuck", "billing", "tokens_committed"),
        Fault("double_apply", "shipping"),
    ]
    if kinds is not None:
        unknown = kinds - set(FAULT_KINDS)
        if unknown:
            raise ValueError(f"unknown fault kinds: {', '.join(sorted(unknown))} (known: {', '.join(FAULT_KINDS)})")
        faults = [f for f in faults if f.kind in kinds]
    # Faulty orders are spread among clean ones: every third order is clean.
    plan, order = {}, 0
    for fault in faults:
        if order % 3 == 2:
            order += 1
        plan[order] = fault
        order += 1
    return plan


def create_topics(bootstrap: str, names: list[str], partitions: int = 2) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(n, num_partitions=partitions, replication_factor=1) for n in names])
    for f in futures.values():
        f.result(30)


def run(spec: RunSpec) -> tuple[Ledger, int]:
    """Run the pipeline to completion; returns the ledger and how many times a worker was killed."""
    out = Path(spec.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    spec.save(out / "run.json")
    create_topics(spec.bootstrap, list(spec.topics.values()))

    store = Store.open(spec.store_kind, spec.store_target)
    try:
        store.create_schema()
        faults = Injector(spec.plan, Ledger.open(spec.ledger_path))
        shop = Shop(store, Dispatcher(spec.bootstrap), faults, spec.topics["orders"])
        for order in range(spec.orders):
            shop.place(order, amount=100 + order)
    finally:
        store.close()  # DuckDB: one writer process at a time

    kills = 0
    while True:
        proc = subprocess.run([sys.executable, "-m", "samples.reference.worker", str(out / "run.json")],
                              capture_output=True, text=True, cwd=REPO)
        if proc.returncode == 0:
            return Ledger.open(spec.ledger_path), kills
        if proc.returncode != -9:
            raise RuntimeError(f"worker failed with {proc.returncode}:\n{proc.stderr[-3000:]}")
        kills += 1
        if kills > MAX_RESTARTS:
            raise RuntimeError("worker keeps dying; giving up")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--store", choices=["duckdb", "postgres"], default="duckdb")
    ap.add_argument("--postgres", help="PostgreSQL conninfo (with --store postgres)")
    ap.add_argument("--orders", type=int, default=40)
    ap.add_argument("--prefix", default="")
    ap.add_argument("--no-faults", action="store_true")
    ap.add_argument("--only", help=f"comma-separated fault kinds to inject: {', '.join(FAULT_KINDS)}")
    args = ap.parse_args(argv)
    target = str(args.out / "state.duckdb") if args.store == "duckdb" else args.postgres
    if not target:
        ap.error("--store postgres needs --postgres CONNINFO")
    try:
        plan = {} if args.no_faults else default_plan(set(args.only.split(",")) if args.only else None)
    except ValueError as exc:
        ap.error(str(exc))
    if plan and max(plan) >= args.orders:
        ap.error(f"the plan needs at least {max(plan) + 1} orders")
    spec = RunSpec(args.store, target, args.bootstrap, str(args.out), args.prefix, args.orders, plan)
    ledger, kills = run(spec)
    print(f"{spec.orders} orders, {len(ledger.entries)} faults recorded, worker killed {kills} times; "
          f"ledger: {spec.ledger_path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""What one chaos run is: store, broker, topics, blob folder, ledger and the fault plan."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

from samples.reference.faults import Fault


@dataclass
class RunSpec:
    store_kind: str  # duckdb | postgres
    store_target: str  # DuckDB file path or PostgreSQL conninfo
    bootstrap: str
    out_dir: str
    prefix: str = ""  # topic and consumer-group prefix, so runs share a broker
    orders: int = 20
    plan: dict[int, Fault] = field(default_factory=dict)

    @property
    def topics(self) -> dict[str, str]:
        return {"orders": f"{self.prefix}orders", "invoices": f"{self.prefix}invoices"}

    def group(self, endpoint: str) -> str:
        return f"{self.prefix}{endpoint}"

    @property
    def blobs_dir(self) -> Path:
        return Path(self.out_dir) / "blobs" / "billing"

    @property
    def ledger_path(self) -> Path:
        return Path(self.out_dir) / "ledger.jsonl"

    def save(self, path: Path) -> None:
        data = asdict(self)
        data["plan"] = {str(k): v.to_dict() for k, v in self.plan.items()}
        path.write_text(json.dumps(data, indent=2))

    @classmethod
    def load(cls, path: Path) -> RunSpec:
        data = json.loads(path.read_text())
        data["plan"] = {int(k): Fault(**v) for k, v in data["plan"].items()}
        return cls(**data)

"""What eoctl sees of an endpoint's input: per-partition counts, offsets and protocol coverage.

One aggregation over the records (Spark, or DuckDB: eoctl.expr.summary); only one row per
partition reaches the driver.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from eoctl.config.model import Config


@dataclass(frozen=True)
class PartitionSummary:
    topic: str
    partition: int
    records: int
    first_offset: int | None
    last_offset: int | None
    committed_offset: int | None
    in_flight: int
    with_protocol_headers: int
    distinct_message_ids: int


@dataclass(frozen=True)
class InputSummary:
    endpoint: str
    source: str
    isolation: str | None
    partitions: list[PartitionSummary]

    @property
    def records(self) -> int:
        return sum(p.records for p in self.partitions)

    def to_dict(self) -> dict[str, Any]:
        return {
            "endpoint": self.endpoint,
            "source": self.source,
            "isolation": self.isolation,
            "records": self.records,
            "partitions": [asdict(p) for p in self.partitions],
        }


def input_of(config: Config, endpoint: str):
    ep = config.endpoint(endpoint)
    if ep.input is None:
        from eoctl.errors import UsageError

        raise UsageError(f"endpoint {endpoint!r} has no [endpoints.{endpoint}.input] configured")
    return ep.input


def input_summary(endpoint: str, source, partitions: list[PartitionSummary]) -> InputSummary:
    kind = f"kafka {source.kafka}" if source.kafka else f"archive {source.archive}"
    return InputSummary(endpoint, kind, source.isolation if source.kafka else None, partitions)

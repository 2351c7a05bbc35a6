"""What the brokers and the archives say, engine-free: partitions, offsets, committed offsets,
transactions (kafka), an archive's committed offsets and file checks (archive), the record
columns (records), an input's summary (summary)."""

from __future__ import annotations

import datetime as dt
from typing import Any

from eoctl.config.model import Config, EndpointConfig, TopicInput
from eoctl.sources.archive import archive_committed_offsets
from eoctl.sources.kafka import OffsetRange, committed_offsets

__all__ = ["OffsetRange", "check_ranges", "input_committed_offsets", "read_input"]


def check_ranges(inputs: list[TopicInput], ranges: list[OffsetRange] | None, config: Config | None = None) -> None:
    """A --range on a topic none of `inputs` reads, or on a partition its topic does not have,
    would scan nothing and look like a clean topic: a usage error naming what there is. The
    partitions are the broker's for a live topic (`config` given), the committed offsets' for an
    archive (a partition without one is not checked)."""
    from eoctl.errors import EoctlError, UsageError

    topics = sorted({t for source in inputs for t in source.topics})
    for r in ranges or []:
        if r.topic not in topics:
            raise UsageError(f"--range {r.topic}:{r.partition}: no endpoint audited reads topic {r.topic!r} "
                             f"(topics read: {', '.join(topics) or 'none'})")
        source = next(s for s in inputs if r.topic in s.topics)
        try:
            if source.kafka and config is not None:
                from eoctl.sources.kafka import topic_partitions

                partitions = topic_partitions(config.kafka[source.kafka], [r.topic])[r.topic]
            elif not source.kafka:
                partitions = sorted(archive_committed_offsets(source).get(r.topic, {}))
            else:
                continue
        except EoctlError:  # the read names what is wrong with the input itself
            continue
        if partitions and r.partition not in partitions:
            shown = f"{partitions[0]}-{partitions[-1]}" if partitions == list(range(partitions[0], partitions[-1] + 1)) \
                else ", ".join(map(str, partitions))
            raise UsageError(f"--range {r.topic}:{r.partition}: topic {r.topic!r} has no partition {r.partition} "
                             f"(partitions: {shown})")


def input_committed_offsets(config: Config, source: TopicInput) -> dict[str, dict[int, int]]:
    """Consumer progress: records below these offsets are processed, the rest are in flight."""
    if source.kafka:
        assert source.group is not None
        return committed_offsets(config.kafka[source.kafka], source.group, source.topics)
    return archive_committed_offsets(source)


def hanging_transactions(config: Config, endpoints: dict[str, EndpointConfig], now: dt.datetime,
                         timeout: dt.timedelta) -> list[dict[str, Any]]:
    """The rows of the `transactions` input (eoctl.expr.inputs.TRANSACTIONS_SCHEMA): what the brokers
    of the live inputs of `endpoints` say of transactions open longer than `timeout`. Both engines
    make their table of these rows."""
    from eoctl.sources.kafka import hanging_partitions

    columns = ("topic", "partition", "last_stable_offset", "high_watermark", "first_unstable_timestamp", "age_seconds")
    rows = []
    for name, ep in endpoints.items():
        if ep.input is not None and ep.input.kafka:
            rows += [{"ep": name, **dict(zip(columns, row))}
                     for row in hanging_partitions(config.kafka[ep.input.kafka], ep.input.topics, now, timeout)]
    return rows

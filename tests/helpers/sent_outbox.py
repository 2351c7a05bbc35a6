"""The recorded chaos sample's outboxes turned into outboxes that keep their rows once sent, in the
three layouts the field has, read from docs/configuration.md's worked examples: an NServiceBus-style flag, a
status column, a sent-at time. The sample's own rows stay pending; sent rows are added, some past the retention.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from eoctl.config import load_config
from tests.helpers.chaos import ChaosRun


@dataclass(frozen=True)
class SentLayout:
    name: str
    ddl: str  # the column added to each outbox, pending by default
    config: str  # the keys of [endpoints.X.outbox] that describe it
    sent: object  # what the column holds in a sent row (a callable of the row's sent time, or a value)


def _readme_layouts() -> dict[str, tuple[str, str]]:
    """docs/configuration.md's worked examples (`<!-- sent-layout: NAME -->` then a TOML block): name -> (the
    column's DDL from its `alter table` comment, the keys of [endpoints.billing.outbox] but retention)."""
    import re

    from tests.helpers.servers import REPO

    text = (REPO / "docs" / "configuration.md").read_text(encoding="utf-8")
    out = {}
    for name, block in re.findall(r"<!-- sent-layout: (\w+) -->\n```toml\n(.*?)```", text, re.S):
        ddl = re.search(r"alter table \S+ add column (.+)", block).group(1).strip()
        keys = block.split("[endpoints.billing.outbox]\n", 1)[1]
        out[name] = (ddl, "\n".join(line for line in keys.splitlines() if not line.startswith("retention")))
    return out


#: what a sent row's column holds in each layout (None: the time it was sent)
_SENT = {"nservicebus": True, "status": "SENT", "sent_at": None}
LAYOUTS = {name: SentLayout(name, ddl, keys, _SENT[name]) for name, (ddl, keys) in _readme_layouts().items()}
assert set(LAYOUTS) == set(_SENT), f"docs/configuration.md's sent layouts are {sorted(LAYOUTS)}"


#: the endpoints whose outboxes keep sent rows here (shipping's stays the reference protocol's)
KEEPING = ("shop", "billing")
RETENTION = dt.timedelta(days=7)


def keep_sent_rows(chaos: ChaosRun, layout: SentLayout, now: dt.datetime, old: int = 4, young: int = 3,
                   tables: dict[str, str] | None = None) -> set[tuple[str, str]]:
    """Give `chaos`'s shop and billing outboxes (`tables`: endpoint -> schema.table, default a schema
    per endpoint; a shared table is altered once) `layout`'s sent column and add `old` sent rows last
    updated past the 7-day retention and `young` within it, per endpoint; the configuration says so.
    Returns (endpoint, incoming_message_id) of the rows past the retention: EO303's ground truth."""
    from samples.reference.store import Store

    tables = tables or {ep: f"{ep}.eo_outbox" for ep in KEEPING}
    past: set[tuple[str, str]] = set()
    column = layout.ddl.split()[0]
    store = Store.open(chaos.store_kind, chaos.store_target)
    try:
        for table in sorted(set(tables.values())):
            store.q(f"alter table {table} add column {layout.ddl}")
        for ep, table in tables.items():
            for i in range(old + young):
                age = RETENTION + dt.timedelta(hours=1 + i) if i < old else dt.timedelta(hours=1 + i)
                sent_at = now - age
                message = f"sent-{ep}-{i}"
                store.q(f"insert into {table} (endpoint, incoming_message_id, incoming_token_id, attempt_id, "
                        f"outgoing, tokens_committed_at, created_at, updated_at, version, {column}) "
                        "values (%s, %s, %s, %s, '[]', %s, %s, %s, 2, %s)",
                        [ep, message, f"tok-{message}", f"att-{message}", sent_at - dt.timedelta(seconds=5),
                         sent_at - dt.timedelta(seconds=10), sent_at, sent_at if layout.sent is None else layout.sent])
                if i < old:
                    past.add((ep, message))
    finally:
        store.close()
    keys = "".join(f"\n[endpoints.{ep}.outbox]\n{layout.config}\nretention = \"7d\"\n" for ep in tables)
    chaos.config_path.write_text(chaos.config_path.read_text() + keys)
    chaos.config = load_config(chaos.config_path, environ=chaos.environ)
    return past

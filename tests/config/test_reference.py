"""docs/config-keys.md is the reference the configuration model gives (eoctl.config.reference), and
it names every key the loader accepts."""

from __future__ import annotations

import pytest

from eoctl.config import model
from eoctl.config.reference import config_reference
from tests.helpers.servers import REPO

pytestmark = pytest.mark.unit


def test_the_key_reference_in_docs_is_the_one_the_model_gives() -> None:
    assert (REPO / "docs" / "config-keys.md").read_text(encoding="utf-8") == config_reference(), (
        "regenerate: python -m eoctl.config.reference > docs/config-keys.md")


def test_every_key_of_every_table_is_in_the_reference_with_what_it_does() -> None:
    text = config_reference()
    tables = [model.EngineConfig, model.KafkaConnection, model.DuckDBStore, model.PostgresStore, model.MySQLStore,
              model.HeaderNames, model.TokenColumns, model.OutboxColumns, model.IntentColumns, model.TokensTable,
              model.OutboxTable, model.IntentsTable, model.TopicInput, model.SinkConfig, model.EndpointConfig,
              model.OpsConfig, model.HistoryConfig, model.ReportConfig, model.AuditConfig]
    for table in tables:
        for name, field in table.model_fields.items():
            key = field.alias or name
            assert f"| `{key}` |" in text, f"{table.__name__}.{name}"
            assert field.description or table in (model.HeaderNames, model.TokenColumns, model.OutboxColumns,
                                                  model.IntentColumns), f"{table.__name__}.{name} says what it is"
    for section in ("[engine]", "[kafka.NAME]", "[[endpoints.NAME.sinks]]", "[endpoints.NAME.outbox.columns]"):
        assert f"## `{section}`" in text
    assert '## `[stores.NAME]` with `type = "postgres"`' in text

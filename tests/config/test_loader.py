from __future__ import annotations

from pathlib import Path

import pytest

from eoctl.config import load_config, masked
from eoctl.config.loader import MASK, interpolate
from eoctl.errors import ConfigError, UsageError
from tests.helpers.configs import write_config

FULL = """
[engine]
master = "local[2]"
conf = { "spark.sql.shuffle.partitions" = "4" }

[kafka.main]
bootstrap_servers = "127.0.0.1:9092"
security_protocol = "SASL_SSL"
sasl_mechanism = "SCRAM-SHA-512"
sasl_username = "eoctl"
sasl_password = "${KAFKA_PASSWORD}"
spark_properties = { "sasl.jaas.config" = "secret-jaas", "client.id" = "eoctl" }

[stores.pg]
type = "postgres"
database = "orders"
user = "eoctl"
password = "${PGPASSWORD}"

[stores.local]
type = "duckdb"
path = "state/state.duckdb"

[protocol.headers]
message_id = "MessageId"

[endpoints.billing]
store = "pg"
blobs = "blobs/billing"
tokens = { table = "Tokens", columns = { token_id = "TokenId" } }
outbox = { store = "local", table = "OutboxData" }

[endpoints.billing.input]
topics = ["orders"]
kafka = "main"
group = "billing"
isolation = "read_uncommitted"

[endpoints.shipping.input]
topics = ["invoices"]
archive = "archive/invoices"
committed_offsets = { invoices = { "0" = 42, "1" = 7 } }

[[endpoints.shipping.sinks]]
name = "shipments"
store = "pg"
table = "shipments"
partition_column = "id"
message_id_column = "source_message_id"
key_columns = ["order_id"]
"""

ENV = {"KAFKA_PASSWORD": "kafka-s3cret", "PGPASSWORD": "pg-s3cret"}


def test_full_config_loads_with_remapped_names_and_resolved_paths(tmp_path: Path) -> None:
    cfg = load_config(write_config(tmp_path, FULL), environ=ENV)
    billing = cfg.endpoints["billing"]
    assert cfg.protocol.headers.message_id == "MessageId"
    assert cfg.protocol.headers.token_id == "eo-token-id"  # unmapped names keep the reference default
    assert billing.tokens.table == "Tokens" and billing.tokens.columns.token_id == "TokenId"
    assert billing.tokens.columns.message_id == "message_id"
    assert billing.store_of(billing.tokens) == "pg" and billing.store_of(billing.outbox) == "local"
    assert billing.blobs == f"file://{tmp_path / 'blobs' / 'billing'}"
    assert cfg.stores["local"].path == str(tmp_path / "state" / "state.duckdb")
    assert cfg.kafka["main"].sasl_password.get_secret_value() == "kafka-s3cret"
    shipping = cfg.endpoints["shipping"].input
    assert shipping.archive == str(tmp_path / "archive" / "invoices")
    assert shipping.committed_offsets == {"invoices": {0: 42, 1: 7}}


def test_masked_view_hides_every_secret(tmp_path: Path) -> None:
    cfg = load_config(write_config(tmp_path, FULL), environ=ENV)
    shown = repr(masked(cfg))
    for secret in ("kafka-s3cret", "pg-s3cret", "secret-jaas"):
        assert secret not in shown
    view = masked(cfg)
    assert view["kafka"]["main"]["sasl_password"] == MASK
    assert view["kafka"]["main"]["spark_properties"]["client.id"] == "eoctl"
    assert view["endpoints"]["billing"]["tokens"]["columns"]["token_id"] == "TokenId"


def test_flags_override_env_override_file(tmp_path: Path) -> None:
    path = write_config(tmp_path, '[engine]\nmaster = "local[1]"\n')
    assert load_config(path, environ={}).engine.master == "local[1]"
    assert load_config(path, environ={"EOCTL_MASTER": "spark://env:7077"}).engine.master == "spark://env:7077"
    flagged = load_config(path, overrides={"master": "spark://flag:7077"}, environ={"EOCTL_MASTER": "spark://env:7077"})
    assert flagged.engine.master == "spark://flag:7077"
    remote = load_config(path, overrides={"remote": "sc://h:15002"}, environ={})
    assert remote.engine.remote == "sc://h:15002"


def test_the_engine_is_chosen_flag_over_env_over_file_and_a_master_means_spark(tmp_path: Path) -> None:
    spark = write_config(tmp_path, "")
    assert load_config(spark, environ={}).engine.kind == "spark"  # the default: the pipeline's engine
    duck = write_config(tmp_path, '[engine]\nkind = "duckdb"\n', name="duck.toml")
    assert load_config(duck, environ={}).engine.kind == "duckdb"
    assert load_config(spark, environ={"EOCTL_ENGINE": "duckdb"}).engine.kind == "duckdb"
    assert load_config(duck, environ={"EOCTL_ENGINE": "spark"}).engine.kind == "spark"
    assert load_config(spark, overrides={"kind": "duckdb"}, environ={"EOCTL_ENGINE": "spark"}).engine.kind == "duckdb"
    # a Spark master or Connect URL given above the file's choice means Spark
    assert load_config(duck, environ={"EOCTL_MASTER": "local[2]"}).engine.kind == "spark"
    assert load_config(duck, overrides={"remote": "sc://h:15002"}, environ={}).engine.kind == "spark"
    # ... but a level that names both must agree
    with pytest.raises(UsageError, match="--master/--remote means the Spark engine: it does not combine with --engine duckdb"):
        load_config(spark, overrides={"kind": "duckdb", "master": "local[2]"}, environ={})
    with pytest.raises(UsageError, match="EOCTL_MASTER/EOCTL_REMOTE means the Spark engine"):
        load_config(spark, environ={"EOCTL_ENGINE": "duckdb", "EOCTL_REMOTE": "sc://h:15002"})
    with pytest.raises(ConfigError, match="engine.kind"):
        load_config(write_config(tmp_path, '[engine]\nkind = "flink"\n', name="flink.toml"), environ={})


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('[engine]\nmastr = "x"\n', "unknown key 'engine.mastr'"),
        ("[stores.s]\ntype = \"postgres\"\ndatabase = \"d\"\nuser = \"u\"\nport = \"five\"\n", "stores.s.port: "),
        ('[stores.s]\ntype = "oracle"\n', "stores.s: 'type' must be 'duckdb', 'postgres' or 'mysql'"),
        ('[endpoints.e.input]\ntopics = ["t"]\n', "set exactly one of 'kafka'"),
        ('[endpoints.e.input]\ntopics = ["t"]\nkafka = "nope"\ngroup = "g"\n', "'nope', which is not a [kafka.*]"),
        ('[endpoints.e]\nstore = "missing"\n', "uses store 'missing'"),
        ('[kafka.k]\nbootstrap_servers = "b"\nsecurity_protocol = "SASL_SSL"\n', "needs sasl_mechanism"),
        ('[endpoints.e.input]\ntopics = ["t"]\narchive = "a"\ncommitted_offsets = { t = { x = 1 } }\n',
         "committed offsets of topic 't'"),
        ('[kafka.k]\nbootstrap_servers = "${NOT_SET_ANYWHERE}"\n', "environment variable NOT_SET_ANYWHERE is not set"),
        ("[engine\n", "invalid TOML"),
    ],
)
def test_bad_configuration_is_one_line_naming_the_problem(tmp_path: Path, text: str, expected: str) -> None:
    path = write_config(tmp_path, text)
    with pytest.raises(ConfigError) as err:
        load_config(path, environ={})
    message = err.value.one_line()
    assert expected in message
    assert str(path) in message
    assert "\n" not in message


def test_missing_file_names_the_path_and_the_ways_to_give_one(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as err:
        load_config(tmp_path / "absent.toml")
    assert "absent.toml: configuration file not found" in err.value.one_line()
    assert "--config" in err.value.one_line()


def test_interpolation_defaults_and_escapes() -> None:
    env = {"A": "1"}
    assert interpolate({"x": "${A}-${B:-two}-$${C}"}, env) == {"x": "1-two-${C}"}
    assert interpolate({"n": 5, "l": ["${A}"]}, env) == {"n": 5, "l": ["1"]}
    with pytest.raises(ConfigError, match=r"l\[0\]: environment variable Z"):
        interpolate({"l": ["${Z}"]}, env)

"""Real secret-bearing settings of Spark, Hadoop (S3A, ABFS, GCS), Kafka (Java and librdkafka),
PostgreSQL and fsspec backends, each with a secret no other text contains, and a configuration
that holds them all on top of the chaos sample's (where none of them stops an audit or gc run).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Setting:
    table: str  # the TOML table it is set in
    name: str
    value: str
    secret: str = ""  # the part of `value` no output may show; default: all of it
    by_value: bool = False  # the name holds no secret: only what the value carries shows it

    def __post_init__(self) -> None:
        if not self.secret:
            object.__setattr__(self, "secret", self.value)

    @property
    def id(self) -> str:
        return f"{self.table}:{self.name}"


def _pem(body: str) -> str:
    return f"-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC{body}\n-----END PRIVATE KEY-----\n"


_ENGINE, _JAVA, _RDKAFKA, _PG, _PG_OPTIONS, _BLOBS = (
    "engine.conf", "kafka.main.spark_properties", "kafka.main.client_properties", "stores.pg", "stores.pg.options",
    "endpoints.billing.blob_options")

SETTINGS = [
    # Spark and Hadoop file systems, through [engine] conf
    Setting(_ENGINE, "spark.hadoop.fs.s3a.secret.key", "S3aSecretKeyQx01"),
    Setting(_ENGINE, "spark.hadoop.fs.s3a.session.token", "S3aSessionTokenQx02"),
    Setting(_ENGINE, "spark.hadoop.fs.azure.account.key.acct.dfs.core.windows.net", "AbfsAccountKeyQx03=="),
    Setting(_ENGINE, "spark.hadoop.fs.azure.sas.invoices.acct.blob.core.windows.net",
            "sv=2022-11-02&ss=b&srt=co&sp=rl&sig=WasbSasSigQx04%3D", "WasbSasSigQx04"),
    Setting(_ENGINE, "spark.hadoop.fs.azure.account.oauth2.client.secret", "AbfsOauthSecretQx05"),
    Setting(_ENGINE, "spark.hadoop.fs.gs.auth.service.account.private.key", _pem("GcsPrivateKeyQx06"),
            "GcsPrivateKeyQx06"),
    Setting(_ENGINE, "spark.authenticate.secret", "SparkAuthSecretQx07"),
    Setting(_ENGINE, "spark.hadoop.javax.jdo.option.ConnectionURL",  # Hive metastore
            "jdbc:postgresql://metastore:5432/hive?user=hive&password=HiveMetastoreQx08", "HiveMetastoreQx08",
            by_value=True),
    Setting(_ENGINE, "spark.ssl.keyStorePassword", "SparkKeystoreQx09"),
    # Kafka: the typed password, the Java client's settings (Spark's reader), librdkafka's
    Setting("kafka.main", "sasl_password", "KafkaTypedPasswordQx10"),
    Setting(_JAVA, "sasl.jaas.config", 'org.apache.kafka.common.security.scram.ScramLoginModule required '
            'username="eoctl" password="JaasPasswordQx11";', "JaasPasswordQx11"),
    Setting(_JAVA, "ssl.key.password", "JavaSslKeyQx12"),
    Setting(_JAVA, "sasl.oauthbearer.token.endpoint.url", "https://eoctl:IdpBasicAuthQx13@idp.example.com/oauth2/token",
            "IdpBasicAuthQx13", by_value=True),
    Setting(_RDKAFKA, "ssl.key.pem", _pem("RdkafkaPemQx14"), "RdkafkaPemQx14"),
    Setting(_RDKAFKA, "sasl.oauthbearer.config", "clientId=eoctl clientSecret=OauthConfigQx15 scope=kafka",
            "OauthConfigQx15", by_value=True),
    Setting(_RDKAFKA, "sasl.oauthbearer.client.secret", "OauthClientSecretQx16"),
    Setting(_RDKAFKA, "ssl.keystore.password", "RdkafkaKeystoreQx17"),
    # PostgreSQL: the typed password, libpq/JDBC parameters
    Setting(_PG, "password", "PgTypedPasswordQx18"),
    Setting(_PG_OPTIONS, "sslpassword", "PgSslPasswordQx19"),
    # fsspec storage options: s3fs, adlfs, gcsfs
    Setting(_BLOBS, "secret", "S3fsSecretQx20"),
    Setting(_BLOBS, "account_key", "AdlfsAccountKeyQx21=="),
    Setting(_BLOBS, "connection_string", "DefaultEndpointsProtocol=https;AccountName=acct;"
            "AccountKey=AdlfsConnKeyQx22==;EndpointSuffix=core.windows.net", "AdlfsConnKeyQx22", by_value=True),
    Setting(_BLOBS, "sas_token", "sv=2022-11-02&sp=rl&sig=AdlfsSasQx23%3D", "AdlfsSasQx23"),
    Setting(_BLOBS, "token", "GcsfsTokenQx24"),
]


def _toml_table(settings: list[Setting], table: str) -> str:
    # JSON strings are valid TOML basic strings (quotes, newlines and backslashes escaped alike)
    return ", ".join(f"{json.dumps(s.name)} = {json.dumps(s.value)}" for s in settings if s.table == table)


def _value(table: str, name: str) -> str:
    return json.dumps(next(s.value for s in SETTINGS if s.table == table and s.name == name))


def with_secrets(config_text: str, extra_conf: dict[str, str] | None = None) -> str:
    """The chaos sample's configuration with every setting of SETTINGS added. The Kafka connection
    and the PostgreSQL store are named by no endpoint, and a local blob prefix ignores the options
    of other file systems, so an audit or gc of the sample runs as before."""
    conf = _toml_table(SETTINGS, _ENGINE)
    conf += "".join(f", {json.dumps(k)} = {json.dumps(v)}" for k, v in (extra_conf or {}).items())
    blobs = f"blob_options = {{ {_toml_table(SETTINGS, _BLOBS)} }}\n"
    assert "[endpoints.billing]\n" in config_text
    text = config_text.replace("[endpoints.billing]\n", f"[endpoints.billing]\n{blobs}")
    return f"""[engine]
conf = {{ {conf} }}

[kafka.main]
bootstrap_servers = "broker.internal:9093"
security_protocol = "SASL_SSL"
sasl_mechanism = "SCRAM-SHA-512"
sasl_username = "eoctl"
sasl_password = {_value("kafka.main", "sasl_password")}
spark_properties = {{ {_toml_table(SETTINGS, _JAVA)} }}
client_properties = {{ {_toml_table(SETTINGS, _RDKAFKA)} }}

[stores.pg]
type = "postgres"
host = "db.internal"
database = "orders"
user = "eoctl"
password = {_value(_PG, "password")}
options = {{ {_toml_table(SETTINGS, _PG_OPTIONS)} }}

{text}"""


def write_with_secrets(config_path: Path, extra_conf: dict[str, str] | None = None) -> Path:
    config_path.write_text(with_secrets(config_path.read_text(encoding="utf-8"), extra_conf), encoding="utf-8")
    return config_path


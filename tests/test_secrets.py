"""The masking rule (eoctl.secrets): secret names, secrets inside values, and the configuration,
the error line, logs and the CLI's streams that apply it."""

from __future__ import annotations

import io
import json
import logging
import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from eoctl.config import load_config, masked
from eoctl.secrets import MASK, MaskingFilter, is_secret_name, mask_text, redact
from tests.helpers.chaos import CHAOS
from tests.helpers.cli import run_eoctl
from tests.helpers.configs import write_config
from tests.helpers.secret_settings import SETTINGS, Setting, with_secrets

pytestmark = pytest.mark.unit

SECRET_NAMES = [
    *(s.name for s in SETTINGS if not s.by_value),
    "fs.s3a.access.key", "spark.hadoop.fs.s3a.bucket.invoices.secret.key", "fs.s3a.encryption.key",
    "spark.hadoop.google.cloud.auth.service.account.json.keyfile", "spark.ssl.keyPassword",
    "spark.kubernetes.authenticate.driver.oauthToken", "ssl.keystore.key", "ssl.truststore.password",
    "sasl.oauthbearer.client.credentials.client.secret", "AWS_SECRET_ACCESS_KEY", "AccountKey",
    "SharedAccessSignature", "SharedAccessKey", "clientSecret", "client_secret", "credential", "pwd", "PWD", "sig",
    "access_token", "api_key", "sasl_password", "sslpassword",
]

# Names that point at a secret or are no secret at all, among them eoctl's own field names.
HARMLESS_NAMES = [
    "spark.sql.shuffle.partitions", "key_column", "key_columns", "partition_key", "token_table", "tokens",
    "token_id", "incoming_token_id", "token_ids", "schema", "bootstrap.servers", "message_id", "key",
    "key.deserializer", "ssl.key.location", "ssl.keystore.location", "sasl.kerberos.keytab", "sasl.username",
    "sasl.oauthbearer.client.id", "sasl.mechanism",
    "spark.hadoop.fs.s3a.aws.credentials.provider", "fs.azure.account.auth.type", "fs.azure.sas.token.provider.type",
    "fs.gs.auth.service.account.private.key.id", "spark.authenticate", "spark.authenticate.secret.file",
    "spark.io.encryption.keySizeBits", "spark.ssl.keyStore", "SharedAccessKeyName", "AWS_ACCESS_KEY_ID",
    "passfile", "eo-token-id", *(s.name for s in SETTINGS if s.by_value),
]


@pytest.mark.parametrize("name", SECRET_NAMES)
def test_a_name_that_holds_a_secret_is_secret(name: str) -> None:
    assert is_secret_name(name)


@pytest.mark.parametrize("name", HARMLESS_NAMES)
def test_a_name_that_holds_no_secret_is_not(name: str) -> None:
    assert not is_secret_name(name)


@pytest.mark.parametrize(("text", "secret", "shown"), [
    ("DefaultEndpointsProtocol=https;AccountName=acct;AccountKey=c2VjcmV0a2V5==;EndpointSuffix=core.windows.net",
     "c2VjcmV0a2V5", "AccountName=acct;AccountKey=********;EndpointSuffix"),
    ("Endpoint=sb://ns.servicebus.windows.net/;SharedAccessKeyName=listen;SharedAccessKey=hubKey1=",
     "hubKey1", "SharedAccessKeyName=listen;SharedAccessKey=********"),
    ("BlobEndpoint=https://acct.blob.core.windows.net/;SharedAccessSignature=sv=2022&sig=sasSig1",
     "sasSig1", "SharedAccessSignature=********"),
    ("https://acct.blob.core.windows.net/c/b.txt?sv=2022-11-02&se=2026-01-01&sig=abc%2Fsig2&sp=r",
     "sig2", "sig=********&sp=r"),
    ("postgresql://eoctl:pgPw3@db.internal:5432/orders", "pgPw3", "postgresql://eoctl:********@db.internal"),
    ("jdbc:postgresql://db/orders?user=eoctl&password=jdbcPw4&ssl=true", "jdbcPw4", "password=********&ssl"),
    ("host=db dbname=orders user=eoctl password='conn info5' sslmode=require", "info5", "password='********' sslmode"),
    ("Server=db;Database=orders;Uid=eoctl;Pwd=odbcPw6;", "odbcPw6", "Pwd=********;"),
    ('org.apache.kafka.common.security.plain.PlainLoginModule required username="eoctl" password="jaasPw7";',
     "jaasPw7", 'username="eoctl" password="********";'),
    ("clientId=eoctl clientSecret=oauthSecret8 scope=kafka", "oauthSecret8",
     "clientId=eoctl clientSecret=******** scope"),
    ("sc://connect.internal:15002/;token=connectToken9;user_id=eoctl", "connectToken9", ";token=********;user_id"),
    ("-----BEGIN ENCRYPTED PRIVATE KEY-----\nMIIFpemBody10\n-----END ENCRYPTED PRIVATE KEY-----", "pemBody10", MASK),
    ("ssl.key.pem=-----BEGIN PRIVATE KEY-----\nMIIEpemBody11\n-----END PRIVATE KEY-----\nssl.key.location=/k.pem",
     "pemBody11", "ssl.key.location=/k.pem"),
    ('{"type": "service_account", "private_key": "-----BEGIN PRIVATE KEY-----\\nMIIEjson12\\n-----END PRIVATE '
     'KEY-----\\n", "private_key_id": "kid", "client_email": "e@p.iam"}', "json12", '"private_key_id": "kid"'),
    ("{'account_key': 'adlfsKey13', 'account_name': 'acct'}", "adlfsKey13", "'account_key': '********'"),
    ("Map(url -> jdbc:postgresql://db/orders, password -> sparkMap14)", "sparkMap14", "password -> ********"),
    ("Authorization: Bearer eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJlb2N0bCJ9.bearer15", "bearer15", "Bearer ********"),
    ("spark.hadoop.fs.s3a.secret.key=s3aKey16 spark.sql.shuffle.partitions=4", "s3aKey16",
     "spark.sql.shuffle.partitions=4"),
])
def test_a_value_never_shows_the_secret_it_carries(text: str, secret: str, shown: str) -> None:
    out = mask_text(text)
    assert secret not in out and shown in out, out
    assert mask_text(out) == out  # masking twice changes nothing: outputs may pass the rule again


@pytest.mark.parametrize("text", [
    "token_id=6f1c message_id=m-1 key=order-30 partition_key=3",
    "sasl.oauthbearer.token.endpoint.url=https://idp/token",
    "a bearer of bad news", '{"token_id": "t-1", "key": "order-1", "headers": {"eo-token-id": "t-1"}}',
    "s3a://invoices/prepared/ab12.txt", "committed offset 12 below log start 40",
])
def test_text_without_secrets_is_left_alone(text: str) -> None:
    assert mask_text(text) == text


@given(st.lists(st.sampled_from([
    # whole secrets of each form the rule knows, and pieces of them
    '"password": "p1"', "'token': 't2'", "s3a://u:p3@h", "password=p4", "Pwd -> p5", "Bearer abcdefghijklmnopq",
    "-----BEGIN X-----\nb6\n-----END X-----", "password", "token", "secret.key", "sig", "bearer", "=", ":", "->",
    "://", "@", "'", '"', " ", ";", "-----BEGIN X-----", "\n", "abcdefghijklmnop", "_id", ".location",
    "PASSWD", "api_key", "keyfile", "Authorization", "jaas", "credential", "PEM", "sas", "x-Sig", "Token",
    "shared-key", "passphrase", '"amount": 1', "a-b",
]), max_size=8).map("".join))
def test_the_quick_test_never_lets_a_secret_through(text: str) -> None:
    # mask_text skips the whole rule for text that cannot match it: the same result as the rule
    from eoctl.secrets import VALUE_REGEX, _masked

    assert mask_text(text) == re.sub(VALUE_REGEX, _masked, text)


def _chaos_with_secrets(tmp_path: Path) -> Path:
    return write_config(tmp_path, with_secrets((CHAOS / "eoctl.toml").read_text(encoding="utf-8")))


@pytest.mark.parametrize("setting", SETTINGS, ids=lambda s: s.id)
def test_the_resolved_configuration_masks_each_secret_setting(tmp_path: Path, setting: Setting) -> None:
    view = masked(load_config(_chaos_with_secrets(tmp_path)))
    assert setting.secret not in json.dumps(view)
    table = view
    for part in setting.table.split(".") if setting.table != "engine.conf" else ("engine", "conf"):
        table = table[part]
    assert setting.name in table  # masked where it stands, not dropped


def test_the_resolved_configuration_keeps_what_is_no_secret(tmp_path: Path) -> None:
    text = with_secrets((CHAOS / "eoctl.toml").read_text(encoding="utf-8"), {"spark.sql.shuffle.partitions": "4"})
    view = masked(load_config(write_config(tmp_path, text)))
    assert view["engine"]["conf"]["spark.sql.shuffle.partitions"] == "4"
    assert view["kafka"]["main"]["sasl_username"] == "eoctl"
    assert view["kafka"]["main"]["bootstrap_servers"] == "broker.internal:9093"
    assert view["kafka"]["main"]["client_properties"]["sasl.oauthbearer.config"] == (
        f"clientId=eoctl clientSecret={MASK} scope=kafka")
    billing = view["endpoints"]["billing"]
    assert billing["tokens"]["table"] == "eo_tokens" and billing["tokens"]["columns"]["token_id"] == "token_id"
    assert billing["blob_options"]["connection_string"].startswith("DefaultEndpointsProtocol=https;AccountName=acct;")
    sink = view["endpoints"]["shipping"]["sinks"][0]
    assert sink["key_columns"] == ["order_id"] and sink["message_id_column"] == "source_message_id"


def test_redact_masks_every_string_of_nested_data_and_keeps_keys() -> None:
    data = {"token_id": "t-1", "rows": [{"uri": "https://a.blob.core.windows.net/c/x?sig=rowSig1"}, 3, None],
            "notes": ("store prod: password=notePw2",)}
    out = redact(data)
    assert "rowSig1" not in json.dumps(out) and "notePw2" not in json.dumps(out)
    assert out["token_id"] == "t-1" and out["rows"][1:] == [3, None]


def test_the_masking_filter_masks_message_arguments_and_traceback() -> None:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.addFilter(MaskingFilter())
    logger = logging.getLogger("tests.secrets.filter")
    logger.addHandler(handler)
    logger.propagate = False
    try:
        try:
            raise RuntimeError("cannot connect to postgresql://eoctl:tracePw1@db/orders")
        except RuntimeError:
            logger.exception("client %s failed with %s", "kafka", "sasl.password=argPw2")
    finally:
        logger.removeHandler(handler)
    out = stream.getvalue()
    assert "tracePw1" not in out and "argPw2" not in out
    assert "client kafka failed with sasl.password=********" in out and "RuntimeError" in out


def test_what_the_cli_prints_is_masked(capsys: pytest.CaptureFixture[str]) -> None:
    from eoctl.cli.output import emit_json, progress, stderr_console

    stderr_console().print("note: store prod unreachable at postgresql://eoctl:stderrPw1@db/orders")
    with progress() as step:  # off a terminal: plain lines, not Rich's
        step("reading postgresql://eoctl:phasePw3@db/orders")
    emit_json({"checks": [{"detail": "AccountKey=stdoutKey2;EndpointSuffix=x"}]})
    out = capsys.readouterr()
    assert "stderrPw1" not in out.err and "postgresql://eoctl:********@db/orders" in out.err
    assert "phasePw3" not in out.err and "] reading postgresql://eoctl:********@db/orders\n" in out.err
    assert "stdoutKey2" not in out.out and json.loads(out.out)["checks"][0]["detail"].startswith("AccountKey=********")


def test_the_error_line_and_the_debug_traceback_are_masked(tmp_path: Path) -> None:
    path = write_config(tmp_path, '[endpoints.e.input]\ntopics = ["t"]\narchive = "a"\n')
    url = "https://eoctl:errorPw1@idp.example.com/"
    for debug in ((), ("--debug",)):
        result = run_eoctl("--config", str(path), *debug, "audit", "--endpoint", url)
        assert result.code == 2, result.stderr
        assert "errorPw1" not in result.stderr + result.stdout
        assert "unknown endpoint 'https://eoctl:********@idp.example.com/'" in result.stderr
    assert "Traceback" in result.stderr  # --debug still shows where it failed


@pytest.mark.parametrize(("line", "secret"), [
    ("password = 12345678", "12345678"),  # a secret of the wrong type is not echoed
    ('port = "postgresql://u:portPw2@db/d"', "portPw2"),  # a secret in the wrong place is masked
])
def test_a_configuration_error_does_not_echo_a_secret(tmp_path: Path, line: str, secret: str) -> None:
    path = write_config(tmp_path, f'[stores.pg]\ntype = "postgres"\ndatabase = "d"\nuser = "u"\n{line}\n')
    result = run_eoctl("--config", str(path), "config", "check")
    assert result.code == 2 and "stores.pg." in result.stderr and secret not in result.stderr, result.stderr

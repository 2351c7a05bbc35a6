"""The scalable generator: its ground truth is checked against the data it wrote, independently."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pytest

from samples.generator import DEFAULT_MIX, GenSpec, generate

N = 40_000


@pytest.fixture(scope="module")
def generated(tmp_path_factory) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("gen") / "state"
    mix = {code: rate * 5 for code, rate in DEFAULT_MIX.items()}  # enough of each at 40k records
    return out, generate(GenSpec(N, out, partitions=4, mix=mix, blob_every=100))


def _q(out: Path, sql: str) -> list[tuple]:
    with duckdb.connect() as db:
        db.execute(f"attach '{out / 'state.duckdb'}' as st (read_only)")
        db.execute(f"create view recs as select * from read_parquet('{out}/topics/orders/*.parquet')")
        db.execute("""create view h as select *, list_filter(headers, lambda x: x.key = 'eo-message-id')[1].value.decode() as mid,
                      list_filter(headers, lambda x: x.key = 'eo-token-id')[1].value.decode() as tok,
                      list_filter(headers, lambda x: x.key = 'eo-sequence')[1].value.decode()::bigint as seq,
                      list_filter(headers, lambda x: x.key = 'eo-blobs')[1].value.decode() as blobs from recs""")
        db.execute(f"create view sink as select * from read_parquet('{out}/sinks/invoices/*.parquet')")
        offsets = json.loads((out / "topics/orders/_committed_offsets.json").read_text())["orders"]
        db.execute("create table committed (p int, c bigint)")
        db.executemany("insert into committed values (?, ?)", [(int(p), c) for p, c in offsets.items()])
        db.execute("create view status as select h.*, h.\"offset\" < c.c as processed from h join committed c on c.p = h.partition")
        return db.execute(sql).fetchall()


def test_every_code_is_injected_and_counted(generated) -> None:
    _, truth = generated
    assert truth["base_records"] == N
    for code in DEFAULT_MIX:
        assert truth["codes"][code]["count"] > 0, code
    assert "EO204" not in truth["codes"]


def test_topic_level_truth_matches_the_archive(generated) -> None:
    out, truth = generated
    c = truth["codes"]
    assert _q(out, "select count(*) from recs")[0][0] == truth["records"]
    # EO101: same id and token at two offsets
    assert _q(out, "select count(*) from (select mid, tok from h where mid is not null group by 1, 2 having count(*) > 1)")[0][0] == c["EO101"]["count"]
    # EO102: one id under several tokens
    assert _q(out, "select count(*) from (select mid from h where mid is not null group by 1 having count(distinct tok) > 1)")[0][0] == c["EO102"]["count"]
    # EO103: one (producer, sequence) on two message ids
    assert _q(out, "select count(*) from (select seq from h where seq is not null group by 1 having count(distinct mid) > 1)")[0][0] == c["EO103"]["count"]
    # EO104: gaps in the producer's sequence
    gaps = _q(out, "select count(*) from (select seq, lead(seq) over (order by seq) as nxt from (select distinct seq from h where seq is not null)) where nxt > seq + 1")[0][0]
    assert gaps == c["EO104"]["count"]
    # EO105: records without protocol headers
    assert _q(out, "select count(*) from h where mid is null")[0][0] == c["EO105"]["count"]


def test_store_sink_and_blob_truth_matches_the_state(generated) -> None:
    out, truth = generated
    c = truth["codes"]
    tokens = "st.billing.eo_tokens"
    # EO202: in flight, token absent, no effect in the sink
    assert _q(out, f"""select count(*) from status s where not processed and mid is not null
                   and tok not in (select token_id from {tokens}) and mid not in (select source_message_id from sink)
                   and (select count(*) from h h2 where h2.mid = s.mid) = 1""")[0][0] == c["EO202"]["count"]
    # EO201: tokens on no record and in no pending entry
    assert _q(out, f"""select count(*) from {tokens} where token_id not in (select tok from h where tok is not null)
                   and token_id not in (select incoming_token_id from st.billing.eo_outbox)""")[0][0] == c["EO201"]["count"]
    # EO203: tokens of processed records still present, not held by a pending entry
    assert _q(out, f"""select count(*) from {tokens} t join status s on s.tok = t.token_id where s.processed
                   and t.token_id not in (select incoming_token_id from st.billing.eo_outbox)""")[0][0] == c["EO203"]["count"]
    assert _q(out, "select count(*) from st.billing.eo_outbox where sent_at is null")[0][0] == c["EO301"]["count"]
    # EO303: sent rows older than the week the outbox keeps them; as many younger ones are not
    assert _q(out, "select count(*) from st.billing.eo_outbox where sent_at is not null "
                   "and updated_at < now() - interval 7 days")[0][0] == c["EO303"]["count"]
    assert _q(out, "select count(*) from st.billing.eo_outbox where sent_at is not null")[0][0] \
        == 2 * c["EO303"]["count"]
    # EO501 / EO502 in the sink
    assert _q(out, "select count(*) from (select source_message_id from sink group by 1 having count(*) > 1)")[0][0] == c["EO501"]["count"]
    assert _q(out, "select count(*) from (select order_id from sink group by 1 having count(distinct amount) > 1)")[0][0] == c["EO502"]["count"]
    # EO503: processed messages with headers and no invoice
    assert _q(out, "select count(distinct mid) from status where processed and mid is not null "
                   "and mid not in (select source_message_id from sink)")[0][0] == c["EO503"]["count"]
    # blobs: orphans, dangling references, hash mismatches
    import hashlib

    files = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in (out / "blobs/shop").iterdir()}
    refs = [json.loads(b)[0] for (b,) in _q(out, "select blobs from h where blobs is not null")]
    published = {r["uri"] for r in refs}
    assert len(set(files) - published) == c["EO401"]["count"]
    assert sum(r["uri"] not in files for r in refs) == c["EO402"]["count"]
    assert sum(r["uri"] in files and files[r["uri"]] != r["sha256"] for r in refs) == c["EO403"]["count"]


def test_log_start_gap_and_bad_mix(tmp_path: Path) -> None:
    truth = generate(GenSpec(2000, tmp_path / "g", partitions=2, log_start_gap=True))
    assert truth["codes"]["EO204"] == {"count": 1, "partitions": [0], "log_start": {"0": 1}}
    offsets = json.loads((tmp_path / "g/topics/orders/_committed_offsets.json").read_text())["orders"]
    assert offsets["0"] == 0
    with duckdb.connect() as db:
        assert db.execute(f"select min(\"offset\") from '{tmp_path}/g/topics/orders/*.parquet' where partition = 0").fetchone()[0] == 1
    with pytest.raises(ValueError, match="unknown codes"):
        generate(GenSpec(10, tmp_path / "x", mix={"EO999": 0.1}))


@pytest.mark.integration
def test_eoctl_reads_the_generated_archive(generated, spark) -> None:
    from eoctl.config import load_config
    from eoctl.engine.spark.summary import summarize_input

    out, truth = generated
    summary = summarize_input(spark, load_config(out / "eoctl.toml"), "billing")
    assert summary.records == truth["records"]
    assert sum(p.with_protocol_headers for p in summary.partitions) == truth["records"] - truth["codes"]["EO105"]["count"]


@pytest.mark.integration
def test_live_kafka_mode(kafka, tmp_path: Path) -> None:
    from confluent_kafka import Consumer, TopicPartition

    topic = f"gen-{tmp_path.name[-8:]}".replace("_", "-")
    truth = generate(GenSpec(3000, tmp_path / "live", partitions=3, kafka=kafka.bootstrap, topic=topic))
    consumer = Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": "billing"})
    total = sum(consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1] for p in range(3))
    committed = {tp.partition: tp.offset for tp in consumer.committed([TopicPartition(topic, p) for p in range(3)], timeout=30)}
    consumer.close()
    assert total == truth["records"]
    assert {str(p): o for p, o in committed.items()} == truth["committed_offsets"]
    assert 'kafka = "main"' in (tmp_path / "live" / "eoctl.toml").read_text()

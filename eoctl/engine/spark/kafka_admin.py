"""Kafka's Admin API for transactions (KIP-664), through the Java client in the Spark driver's JVM.

Why the Java client: confluent-kafka 2.16 (librdkafka 2.16), eoctl's Python client, offers no
DescribeProducers or AbortTransaction; the Java `Admin` of kafka-clients has both (since Kafka 3.0)
and is on the classpath of every Spark session eoctl starts (the Kafka connector depends on it), so
nothing more is installed. It needs the driver's JVM: a local or `--master` session, not Spark
Connect.
"""

from __future__ import annotations

from typing import Any

from eoctl.config.model import KafkaConnection
from eoctl.sources.kafka import ProducerState


class JavaTransactionAdmin:
    """eoctl.ops.abort_txn.TransactionAdmin on one cluster, in the JVM of `spark`."""

    def __init__(self, spark: Any, conn: KafkaConnection) -> None:
        from eoctl.engine.spark.sources import spark_options
        from eoctl.errors import UsageError

        jvm = getattr(spark, "_jvm", None)
        if jvm is None:
            raise UsageError("abort-transaction needs the Spark driver's JVM (Kafka's Java Admin client): "
                             "use a local or --master session, not --remote (Spark Connect)")
        self._jvm = jvm
        self._timeout_ms = int(conn.timeout_seconds * 1000)
        props = jvm.java.util.Properties()
        for key, value in spark_options(conn).items():  # the Java client's settings, as Spark's reader gets them
            props.setProperty(key.removeprefix("kafka."), str(value))
        props.setProperty("request.timeout.ms", str(self._timeout_ms))
        props.setProperty("default.api.timeout.ms", str(self._timeout_ms))
        self._admin = jvm.org.apache.kafka.clients.admin.AdminClient.create(props)

    def _get(self, future: Any) -> Any:
        return future.get(self._timeout_ms, self._jvm.java.util.concurrent.TimeUnit.MILLISECONDS)

    def producers(self, partitions: list[tuple[str, int]]) -> dict[tuple[str, int], list[ProducerState]]:
        jvm = self._jvm
        wanted = jvm.java.util.ArrayList()
        for topic, partition in partitions:
            wanted.add(jvm.org.apache.kafka.common.TopicPartition(topic, partition))
        described = self._get(self._admin.describeProducers(wanted).all())
        out: dict[tuple[str, int], list[ProducerState]] = {}
        for tp in described.keySet():
            states = []
            for state in described.get(tp).activeProducers():
                start = state.currentTransactionStartOffset()
                epoch = state.coordinatorEpoch()
                states.append(ProducerState(
                    state.producerId(), state.producerEpoch(), epoch.getAsInt() if epoch.isPresent() else -1,
                    start.getAsLong() if start.isPresent() else None))
            out[(tp.topic(), tp.partition())] = states
        return out

    def abort(self, topic: str, partition: int, state: ProducerState) -> None:
        jvm = self._jvm
        spec = jvm.org.apache.kafka.clients.admin.AbortTransactionSpec(
            jvm.org.apache.kafka.common.TopicPartition(topic, partition), state.producer_id,
            jvm.java.lang.Short.valueOf(str(state.producer_epoch)), state.coordinator_epoch)
        self._get(self._admin.abortTransaction(spec).all())

    def close(self) -> None:
        self._admin.close()

"""A real single-node KRaft Kafka broker, started from Maven Central jars with `java`."""

from __future__ import annotations

import os
import signal
import subprocess
import tempfile
from pathlib import Path

from tests.helpers.jars import kafka_broker_jars_dir
from tests.helpers.servers import free_port, log_tail, wait_until

_LOG4J2 = """\
rootLogger.level = warn
rootLogger.appenderRef.file.ref = file
appender.file.type = File
appender.file.name = file
appender.file.fileName = {log}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = %d %p %c{{1}}: %m%n
"""

_SERVER = """\
process.roles=broker,controller
node.id=1
controller.quorum.bootstrap.servers=127.0.0.1:{cport}
listeners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{cport}
advertised.listeners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{cport}
inter.broker.listener.name=PLAINTEXT
controller.listener.names=CONTROLLER
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
log.dirs={data}
num.partitions=1
offsets.topic.replication.factor=1
offsets.topic.num.partitions=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
transaction.state.log.num.partitions=1
group.initial.rebalance.delay.ms=0
auto.create.topics.enable=false
"""


class KafkaBroker:
    def __init__(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="eoctl-kafka-"))
        self.port = free_port()
        self.cport = free_port()
        self.proc: subprocess.Popen | None = None
        self.log = self.dir / "broker.log"

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout: float = 90) -> None:
        cp = f"{kafka_broker_jars_dir()}/*"
        props = self.dir / "server.properties"
        props.write_text(_SERVER.format(port=self.port, cport=self.cport, data=self.dir / "data"))
        log4j = self.dir / "log4j2.properties"
        log4j.write_text(_LOG4J2.format(log=self.log))
        java = ["java", f"-Dlog4j2.configurationFile={log4j}", "-cp", cp]
        if not (self.dir / "data" / "meta.properties").exists():
            cluster_id = subprocess.run(
                [*java, "kafka.tools.StorageTool", "random-uuid"], capture_output=True, text=True, check=True
            ).stdout.strip().splitlines()[-1]
            subprocess.run(
                [*java, "kafka.tools.StorageTool", "format", "--standalone", "-t", cluster_id, "-c", str(props)],
                capture_output=True, text=True, check=True,
            )
        out = open(self.dir / "stdout.log", "ab")
        self.proc = subprocess.Popen(
            ["java", "-Xmx512m", "-Xms256m", f"-Dlog4j2.configurationFile={log4j}", "-cp", cp, "kafka.Kafka", str(props)],
            stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )
        if not wait_until(self._ready, timeout):
            tail = log_tail(self.log) + "\n" + log_tail(self.dir / "stdout.log")
            self.stop()
            raise RuntimeError(f"Kafka broker did not become ready in {timeout}s:\n{tail}")

    def _ready(self) -> bool:
        from confluent_kafka.admin import AdminClient

        if self.proc is not None and self.proc.poll() is not None:
            raise RuntimeError(f"Kafka broker exited with {self.proc.returncode}:\n{log_tail(self.log)}")
        try:
            # log_level 0: the refused connections while the broker starts are expected, not news.
            md = AdminClient({"bootstrap.servers": self.bootstrap, "log_level": 0}).list_topics(timeout=2)
            return len(md.brokers) == 1
        except Exception:
            return False

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        self.proc = None

    def create_topic(self, name: str, partitions: int = 1) -> None:
        from confluent_kafka.admin import AdminClient, NewTopic

        client = AdminClient({"bootstrap.servers": self.bootstrap})  # must outlive its futures
        futures = client.create_topics(
            [NewTopic(name, num_partitions=partitions, replication_factor=1)], operation_timeout=30
        )
        for f in futures.values():
            f.result(30)

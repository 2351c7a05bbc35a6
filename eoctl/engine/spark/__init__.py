"""The Spark engine: local, a cluster (`--master`) or Spark Connect (eoctl.engine.run.open_run opens
its run).

- session, jars, class_archive: the session, its connector jars from Maven, the classes it loads;
- sources: topics, topic archives and tables read as DataFrames;
- records: the working copy of the records and the record index of `audit --since-last`;
- stores: store tables, sinks and blob prefixes, each read once per run;
- run: SparkRun, the inputs of eoctl.expr.inputs as temporary views, and evidence;
- trace: the trace reader; kafka_admin: transactions aborted through Kafka's Java Admin API.
"""

from eoctl.engine.spark.session import end_driver_jvm, java_version, start_session, stop_session

__all__ = ["end_driver_jvm", "java_version", "start_session", "stop_session"]

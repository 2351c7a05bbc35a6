"""The DuckDB engine: in process, on one machine (eoctl.engine.run.open_run opens its run).

- sql: the connection and SQL helpers;
- records: topic archives and live topics read into the working copy of the records;
- stores: store tables, sinks and blob prefixes read into the run's database;
- run: DuckDBRun, the inputs of eoctl.expr.inputs as views, and evidence;
- index: the record index of `audit --since-last`;
- trace: the trace reader;
- kafka_reader, kafka_worker: live topics read by reader processes into Arrow.
"""

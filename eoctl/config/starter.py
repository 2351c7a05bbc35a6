"""The commented starting configuration `eoctl config init` writes: every section a pipeline needs,
commented out, so that the file is valid as written and each key says what it is for."""

STARTER = '''\
# eoctl configuration. Uncomment and fill in what your pipeline has; `eoctl config check` lists every
# problem with its key path, and `eoctl doctor` checks each part against the real servers.
# Paths are relative to this file. Secrets come from the environment: password = "${PG_PASSWORD}".

# --- Where each endpoint keeps its tokens, outbox and intents -------------------------------------
# [stores.main]
# type = "postgres"              # or "mysql" (port 3306, no schema), or "duckdb" (then: path = "state.duckdb")
# host = "db.internal"
# port = 5432
# database = "orders"
# user = "eoctl_reader"
# password = "${PG_PASSWORD}"
# schema = "public"

# --- The Kafka cluster the endpoints consume from ---------------------------------------------------
# [kafka.main]
# bootstrap_servers = "kafka-1:9092,kafka-2:9092"

# --- One section per endpoint (a service that consumes and produces with the protocol) ---------------
# [endpoints.billing]
# store = "main"                 # its tokens, outbox and intents tables are in this store
# name_in_store = "billing"      # its name in shared tables and in eo-producer, if not the section's name
# blobs = "s3://bucket/prepared/billing/"   # its prepared blobs (pip install 'eoctl[s3]' for s3://)
# tokens = { table = "eo_tokens" }
# outbox = { table = "eo_outbox" }
# intents = { table = "eo_intents" }        # optional: pipelines without register-cleanup have none
#
# [endpoints.billing.input]
# topics = ["orders"]
# kafka = "main"                 # a live topic; or archive = "topics/orders" (Parquet or JSON lines)
# group = "billing"              # the consumer group whose committed offsets say what is processed
#
# [[endpoints.billing.sinks]]    # where its effects land (a table or files), for the sink checks
# name = "invoices"
# store = "main"
# table = "invoices"
# message_id_column = "source_message_id"
# key_columns = ["order_id"]

# --- The engine: Spark (default) or DuckDB on one machine ---------------------------------------------
# [engine]
# kind = "duckdb"                # or "spark"; --engine on the command line wins

# --- The audit's defaults (a flag on the command line wins) --------------------------------------------
# [audit]
# grace = "24h"                  # orphan tokens and blobs younger than this are not findings
# stuck_after = "15m"            # outbox entries pending longer are stuck

# --- Reports --------------------------------------------------------------------------------------------
# [report]
# docs_url = "https://git.example.com/ops/eoctl/blob/main/docs/findings.md"
'''

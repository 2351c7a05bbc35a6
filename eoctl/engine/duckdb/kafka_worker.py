"""A reader process of eoctl.engine.duckdb.kafka_reader: reads a JSON request on stdin (the connection,
the isolation, the partitions' offset ranges), writes the records to stdout as an Arrow IPC
stream, and on failure one line on stderr (exit 3). It ignores Ctrl-C: its parent stops it.

    python -m eoctl.engine.duckdb.kafka_worker < request.json > records.arrows
"""

from __future__ import annotations

import json
import logging
import signal
import sys
from typing import Any

from eoctl.config.model import KafkaConnection


def connection_json(conn: KafkaConnection) -> dict[str, Any]:
    """The connection as JSON for a reader, its password in clear (it goes through a pipe only)."""
    data = conn.model_dump(mode="json")
    if conn.sasl_password is not None:
        data["sasl_password"] = conn.sasl_password.get_secret_value()
    return data


def main() -> int:
    from eoctl.engine.duckdb.kafka_reader import consume, record_schema
    from eoctl.errors import SourceError

    # librdkafka's lines would fill the stderr pipe the parent reads only at the end: the one
    # line that matters is the failure's, written below
    logging.disable(logging.CRITICAL)
    # Ctrl-C reaches the whole process group: the parent stops the run and ends its readers
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        import pyarrow as pa

        request = json.loads(sys.stdin.buffer.read())
        conn = KafkaConnection.model_validate(request["connection"])
        plan = {(t, p): (s, e) for t, p, s, e in request["plan"]}
        with pa.ipc.new_stream(sys.stdout.buffer, record_schema()) as out:
            for batch in consume(conn, request["isolation"], plan):
                out.write_batch(batch)
    except SourceError as exc:
        print(str(exc), file=sys.stderr)
        return 3
    except BrokenPipeError:
        return 141  # the parent is gone: nothing to tell anyone
    return 0


if __name__ == "__main__":
    sys.exit(main())

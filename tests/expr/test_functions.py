"""compile_sql: ibis.to_sql's SQL, through the one compiler a run needs."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from tests.helpers.servers import REPO

pytestmark = pytest.mark.unit

# In a new interpreter: nothing has imported Ibis's package of compilers yet, as in a command.
_SCRIPT = textwrap.dedent("""
    import sys
    from eoctl.expr import Dialect, compile_sql
    from eoctl.expr.records import commits_table, protocol_table, working_copy

    exprs = {d: working_copy(protocol_table(), commits_table(), d) for d in Dialect}
    ours = {d: compile_sql(e, d) for d, e in exprs.items()}
    alone = sorted(m for m in sys.modules if m.startswith("ibis.backends.sql.compilers."))
    print("alone", ",".join(alone))

    import ibis
    for d, e in exprs.items():
        assert ours[d] == str(ibis.to_sql(e, dialect=d.value)), d
    from ibis.backends.sql.compilers import PostgresCompiler, TrinoCompiler
    assert "SELECT" in str(ibis.to_sql(ibis.table({"a": "int64"}, name="t").filter(ibis._.a > 1), dialect="trino"))
    print("after", len([m for m in sys.modules if m.startswith("ibis.backends.sql.compilers.")]))
""")


def test_compile_sql_imports_one_compiler_and_writes_what_ibis_writes() -> None:
    result = subprocess.run([sys.executable, "-c", _SCRIPT], cwd=REPO, capture_output=True, text=True, check=False,
                            timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    alone, after = result.stdout.splitlines()
    # DuckDB's and Spark's compilers (with what they import), not the other eighteen
    assert set(alone.split()[1].split(",")) <= {
        "ibis.backends.sql.compilers._compat", "ibis.backends.sql.compilers.base",
        "ibis.backends.sql.compilers.duckdb", "ibis.backends.sql.compilers.pyspark"}, alone
    # asked for the whole package, the stand-in ran the real one: every compiler is there
    assert int(after.split()[1]) >= 20

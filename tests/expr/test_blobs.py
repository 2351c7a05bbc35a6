"""EO401-EO403 (eoctl.expr.blobs) against a plain-Python reading of the protocol (DESIGN.md §2):
each endpoint's blob prefix listing (names relative to the prefix) against the eo-blobs references
of the valid records it produced and of its pending outbox entries' outgoing messages, where a
reference names a blob relative to the prefix or by an absolute URI under it. Hypothesis states on
DuckDB; a few fixed rich states on Spark too."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from typing import Any

import pytest
from hypothesis import Phase, given, settings
from hypothesis import strategies as st

from tests.helpers.check_tables import CheckTables, differences, outgoing, record, store_row

NOW = dt.datetime(2026, 11, 10)  # the audit's now (CheckTables' default options), UTC wall time
DEFAULT_GRACE = dt.timedelta(hours=24)
#: endpoint -> blob prefix: a file URI, and an object-store URI given with a trailing slash
PREFIXES = {"billing": "file:///data/blobs/billing", "shipping": "s3://bucket/ship/"}
#: names under a prefix (one in a sub-folder, one without an extension)
NAMES = ["a.bin", "b.bin", "sub/c.bin", "d"]
# Drawn states are reported as drawn, not shrunk: shrinking one costs minutes of engine runs, and
# the minimal examples of what these tests found are tests of their own below (add Phase.shrink
# to hunt a new one down).
# derandomized: the same states on every run, so the counts the tests hold not vacuous are stable in CI
SETTINGS = settings(max_examples=40, deadline=None, derandomize=True, phases=[Phase.explicit, Phase.generate])


def sha(content: int) -> str:
    return hashlib.sha256(str(content).encode()).hexdigest()


def config(blobs_header: str | None = None):
    """billing and shipping prepare blobs; orders has a store but no blob prefix. `blobs_header`:
    the eo-blobs header's configured name (default: the protocol's)."""
    from eoctl.config.model import Config

    return Config.model_validate({
        "stores": {"state": {"type": "duckdb", "path": "/nowhere/state.duckdb"}},
        "protocol": {"headers": {"blobs": blobs_header}} if blobs_header else {},
        "endpoints": {"billing": {"store": "state", "blobs": PREFIXES["billing"]},
                      "shipping": {"store": "state", "blobs": PREFIXES["shipping"]},
                      "orders": {"store": "state"}},
    })


def uri(endpoint: str, name: str, absolute: bool) -> str:
    """How a message names blob `name` of `endpoint`'s prefix: relative, or an absolute URI under it."""
    return PREFIXES[endpoint].rstrip("/") + "/" + name if absolute else name


def tables(state: dict[str, Any]) -> CheckTables:
    """A drawn or hand-written state as the check's tables: `header` (None: eo-blobs), `grace`
    (None: the default), records, stores, blobs as CheckTables takes them."""
    from eoctl.options import AuditOptions

    options = None if state.get("grace") is None else AuditOptions(
        now=NOW.replace(tzinfo=dt.timezone.utc), grace=state["grace"])
    return CheckTables(config(state.get("header")), records=state.get("records", []),
                       stores=state.get("stores", {}), blobs=state.get("blobs", {}), options=options)


# ------------------------------------------------------------------------------------ the oracle


def _relative(ref_uri: str, prefix: str) -> str | None:
    """The name a reference gives a blob of `prefix`: a relative name as it is, an absolute URI
    under the prefix without it; an absolute URI elsewhere names no blob of this prefix."""
    base = prefix.rstrip("/") + "/"
    if ref_uri.startswith(base):
        return ref_uri[len(base):]
    return None if "://" in ref_uri else ref_uri


def _refs(text: str | None) -> list[dict[str, str]]:
    """The references an eo-blobs value makes: none unless it is a JSON list (of {uri, sha256})."""
    try:
        refs = json.loads(text) if text else []
    except ValueError:
        return []
    return refs if isinstance(refs, list) else []


def _references(t: CheckTables, endpoint: str) -> dict[tuple, str | None]:
    """(topic, partition, offset, message_id, name) -> expected sha256 of every blob the valid
    records `endpoint` produced publish: one per record and blob, however many endpoints read the
    record."""
    prefix = t.config.endpoints[endpoint].blobs
    out = {}
    for r in t.records:
        if r["problem"] is None and r["producer"] == endpoint:
            for ref in _refs(r["blobs"]):
                name = _relative(ref["uri"], prefix)
                if name is not None:
                    out[(r["topic"], r["partition"], r["offset"], r["message_id"], name)] = ref.get("sha256")
    return out


def _held(t: CheckTables, endpoint: str) -> set[str]:
    """Names of blobs that `endpoint`'s pending outbox entries will publish (the outgoing
    messages' blob header, by its configured name)."""
    header = t.config.protocol.headers.blobs
    prefix = t.config.endpoints[endpoint].blobs
    names = set()
    for entry in t.stores.get("outbox", []):
        if entry["ep"] == endpoint:
            for message in json.loads(entry["outgoing"]):
                for ref in _refs((message.get("headers") or {}).get(header)):
                    names.add(_relative(ref["uri"], prefix))
    return names - {None}


def oracle(t: CheckTables, code: str) -> dict[str, list[dict[str, Any]]]:
    """What check `code` must find in `t`, by endpoint (endpoints without evidence left out)."""
    grace = t.options.grace if t.options else DEFAULT_GRACE
    out: dict[str, list[dict[str, Any]]] = {}
    for endpoint, ep in t.config.endpoints.items():
        if not ep.blobs:
            continue
        listing = {b["name"]: b for b in t.blobs.get(endpoint, [])}
        refs = _references(t, endpoint)
        rows = []
        if code == "EO401":
            # a valid record without a producer might be this endpoint's: its blobs are not
            # orphans (gc-blobs keeps them too)
            anyones = {name for r in t.records if r["problem"] is None and r["producer"] is None
                       for ref in _refs(r["blobs"]) if (name := _relative(ref["uri"], ep.blobs)) is not None}
            named = {name for (*_, name) in refs} | _held(t, endpoint) | anyones
            for b in listing.values():
                if b["modified"] < NOW - grace and b["name"] not in named:
                    row = {"name": b["name"], "size": b["size"], "modified": b["modified"]}
                    if "intents" in t.stores:  # the attempt that registered it, if one did
                        by = [i for i in t.stores["intents"]
                              if i["ep"] == endpoint and i["kind"] == "blob" and i["ref"] == b["name"]]
                        assert len(by) <= 1, "states register a name once per endpoint"
                        row["registered_by_message"] = by[0]["incoming_message_id"] if by else None
                        row["registered_by_attempt"] = by[0]["attempt_id"] if by else None
                    rows.append(row)
        for (topic, partition, offset, message_id, name), expected in refs.items():
            where = {"topic": topic, "partition": partition, "offset": offset, "message_id": message_id,
                     "name": name, "expected_sha256": expected}
            if code == "EO402" and name not in listing:
                rows.append(where)
            actual = listing[name]["actual_sha256"] if name in listing else None
            if code == "EO403" and None not in (actual, expected) and expected.lower() != actual.lower():
                rows.append({**where, "actual_sha256": actual})
        if rows:
            out[endpoint] = rows
    return out


def canonical(evidence: dict[str, list[dict[str, Any]]]) -> dict[str, list[tuple]]:
    return {ep: sorted((tuple(sorted(r.items())) for r in rows), key=repr) for ep, rows in evidence.items()}


def found(t: CheckTables, code: str, engine: str = "duckdb", spark: Any = None) -> dict[str, list[tuple]]:
    return canonical(t.evidence(code, engine, spark))


# --------------------------------------------------------------------------------- the states

_reading = st.sampled_from([("billing",), ("shipping",), ("billing", "shipping")])
_sha = st.builds(lambda k, upper: sha(k).upper() if upper else sha(k), st.integers(0, 2), st.booleans())


@st.composite
def blob_states(draw) -> dict[str, Any]:
    header = draw(st.sampled_from([None, "x-blobs"]))
    other_header = "x-blobs" if header is None else "eo-blobs"
    grace = draw(st.sampled_from([None, dt.timedelta(hours=1), dt.timedelta(0)]))
    cutoff = NOW - (grace if grace is not None else DEFAULT_GRACE)
    # ages about the cutoff: old, just old, at it (not older: young), just young, young
    ages = [-dt.timedelta(days=3), -dt.timedelta(seconds=1), -dt.timedelta(milliseconds=1), dt.timedelta(0),
            dt.timedelta(milliseconds=1), dt.timedelta(hours=1)]
    blobs = {}
    for ep in PREFIXES:
        names = draw(st.lists(st.sampled_from(NAMES), unique=True, min_size=1, max_size=4), label=f"{ep} listing")
        blobs[ep] = [{"name": n, "size": draw(st.integers(0, 9)), "modified": cutoff + draw(st.sampled_from(ages)),
                      "actual_sha256": draw(st.sampled_from([sha(0), sha(1), None]))} for n in names]

    def ref_list(owner: str, with_sha: bool = True) -> list[dict[str, str]]:
        """References to blobs of `owner`'s prefix (billing's for an endpoint without one)."""
        prefix_of = owner if owner in PREFIXES else "billing"
        names = draw(st.lists(st.sampled_from([*NAMES, "gone.bin"]), unique=True, max_size=3))
        return [{"uri": uri(prefix_of, n, draw(st.booleans())), **({"sha256": draw(_sha)} if with_sha else {})}
                for n in names]

    records = []
    for i in range(draw(st.integers(1, 6))):
        producer = draw(st.sampled_from(["billing", "shipping", "billing", "shipping", "orders", None]))
        valid = draw(st.sampled_from([True, True, True, False]))
        has_blobs = draw(st.sampled_from([True, True, True, False]))
        blobs_text = json.dumps(ref_list(producer or "billing")) if has_blobs else None
        for reader in draw(_reading):  # a record every endpoint reading its topic has
            records.append(record(endpoint=reader, topic="invoices", partition=i % 2, offset=i, message_id=f"m{i}",
                                  token_id=f"k{i}", producer=producer, blobs=blobs_text,
                                  problem=None if valid else "eo-sequence is not an integer"))
    entries = []
    for i in range(draw(st.integers(0, 4) | st.integers(2, 4))):
        ep = draw(st.sampled_from(["billing", "shipping", "orders"]))
        messages = [{"message_id": f"out{i}-{j}",
                     "headers": {draw(st.sampled_from([header or "eo-blobs", header or "eo-blobs", other_header])):
                                 json.dumps(ref_list(ep, with_sha=draw(st.booleans())))}}
                    for j in range(draw(st.integers(1, 2)))]
        entries.append(store_row("outbox", ep, incoming_message_id=f"in{i}", outgoing=outgoing(*messages)))
    stores: dict[str, list] = {"outbox": entries}
    if draw(st.booleans(), label="intents table"):
        registered = draw(st.lists(st.tuples(st.sampled_from(["billing", "shipping", "orders"]),
                                             st.sampled_from(NAMES)), unique=True, max_size=5))
        stores["intents"] = [store_row("intents", ep, intent_id=f"i{j}", incoming_message_id=f"in{j}",
                                       attempt_id=f"att{j}", kind=draw(st.sampled_from(["blob", "blob", "token"])),
                                       ref=name) for j, (ep, name) in enumerate(registered)]
    return {"header": header, "grace": grace, "records": records, "stores": stores, "blobs": blobs}


# ------------------------------------------------------------------------- oracle against check


def _against_oracle(code: str, branch) -> None:
    """Check `code` on DuckDB equals the oracle over drawn states; `branch(state, t)` says whether
    a state reaches what the test is about: enough of them must, and some must find something."""
    seen = {"states": 0, "found": 0, "branch": 0}

    @SETTINGS
    @given(state=blob_states())
    def run(state: dict[str, Any]) -> None:
        t = tables(state)
        expected, got = canonical(oracle(t, code)), found(t, code)
        assert got == expected, f"check (left) and oracle (right) differ: {differences(got, expected)}"
        seen["states"] += 1
        seen["found"] += bool(expected)
        seen["branch"] += bool(branch(state, t))

    run()
    # not vacuous: the states drew findings, and the branch the test is about
    assert seen["found"] >= seen["states"] // 10 and seen["branch"] >= 1, seen


def _old_blob_held_by_absolute_uri(state, t: CheckTables) -> bool:
    """Some old blob is named by an absolute URI in a pending entry of its endpoint."""
    header = t.config.protocol.headers.blobs
    grace = t.options.grace if t.options else DEFAULT_GRACE
    for entry in t.stores["outbox"]:
        if entry["ep"] in PREFIXES:
            for m in json.loads(entry["outgoing"]):
                for ref in _refs(m["headers"].get(header)):
                    if "://" in ref["uri"] and any(b["modified"] < NOW - grace and ref["uri"].endswith("/" + b["name"])
                                                   for b in t.blobs[entry["ep"]]):
                        return True
    return False


@pytest.mark.unit
def test_orphan_blobs_are_old_and_named_by_no_valid_record_of_the_producer_and_no_pending_entry() -> None:
    """EO401: a listed blob older than the grace period that no valid record its endpoint produced
    and no pending entry of its endpoint names (relatively or by absolute URI, in the configured
    header), with the attempt that registered it when there is an intents table."""
    _against_oracle("EO401", _old_blob_held_by_absolute_uri)


@pytest.mark.unit
def test_dangling_references_are_published_blobs_missing_from_the_listing() -> None:
    """EO402: a blob a valid record publishes (relatively or by absolute URI) that its producer's
    prefix does not have: one row per record and blob."""
    _against_oracle("EO402", lambda state, t: any(
        "://" in ref["uri"] for r in t.records if r["problem"] is None and r["producer"] in PREFIXES
        for ref in _refs(r["blobs"])))


@pytest.mark.unit
def test_hash_mismatches_compare_the_published_sha256_case_insensitively() -> None:
    """EO403: a published blob whose listed sha256 is not the one its record carries, in any case."""
    _against_oracle("EO403", lambda state, t: any(
        ref["sha256"] != ref["sha256"].lower() for r in t.records if r["producer"] in PREFIXES
        for ref in _refs(r["blobs"])))


# ------------------------------------------------------------------ the disagreements, minimal


def _listed(name: str, modified: dt.datetime = NOW - dt.timedelta(days=3), actual: str | None = sha(0)) -> dict:
    return {"name": name, "size": len(name), "modified": modified, "actual_sha256": actual}


def _entry(ep: str, *refs: str, header: str = "eo-blobs") -> dict:
    return store_row("outbox", ep, incoming_message_id="in", outgoing=outgoing(
        {"message_id": "out", "headers": {header: json.dumps([{"uri": u, "sha256": sha(0)} for u in refs])}}))


@pytest.mark.unit
@pytest.mark.parametrize("ep", list(PREFIXES))
def test_a_pending_entry_holds_the_blob_it_names_by_an_absolute_uri(ep: str) -> None:
    """An old blob that the endpoint's pending entry names by an absolute URI under the prefix is
    held (its message has not left yet): no EO401, as when the entry names it relatively."""
    def state(*entries):
        return tables({"blobs": {ep: [_listed("a.bin")]}, "stores": {"outbox": list(entries)}})

    absolute, relative = state(_entry(ep, uri(ep, "a.bin", True))), state(_entry(ep, "a.bin"))
    assert oracle(absolute, "EO401") == oracle(relative, "EO401") == {}
    assert oracle(state(), "EO401")  # not vacuous: without the entry the blob is an orphan
    assert found(relative, "EO401") == {}
    assert found(absolute, "EO401") == canonical(oracle(absolute, "EO401"))


@pytest.mark.unit
def test_an_orphans_registration_is_from_its_own_endpoints_intents() -> None:
    """Blob names are relative to each endpoint's prefix: billing's intent for `a.bin` registered
    billing's a.bin, not shipping's. Shipping's orphan a.bin has no registration."""
    t = tables({"blobs": {"shipping": [_listed("a.bin")]}, "stores": {"outbox": [], "intents": [
        store_row("intents", "billing", intent_id="i0", incoming_message_id="in0", attempt_id="att0",
                  kind="blob", ref="a.bin")]}})
    expected = oracle(t, "EO401")
    assert expected["shipping"][0]["registered_by_message"] is None
    own = tables({"blobs": {"shipping": [_listed("a.bin")]}, "stores": {"outbox": [], "intents": [
        {**t.stores["intents"][0], "ep": "shipping"}]}})
    assert oracle(own, "EO401")["shipping"][0]["registered_by_message"] == "in0"  # not vacuous
    assert found(own, "EO401") == canonical(oracle(own, "EO401"))
    assert found(t, "EO401") == canonical(expected)


@pytest.mark.unit
@pytest.mark.parametrize("code", ["EO402", "EO403"])
def test_a_record_two_endpoints_read_is_one_reference(code: str) -> None:
    """A record of billing's on a topic two endpoints read is in the working copy once per reader;
    the blob it publishes is still one reference: one EO402 (missing) or EO403 (changed) row."""
    def state(readers):
        blobs = json.dumps([{"uri": "gone.bin", "sha256": sha(0)}, {"uri": "a.bin", "sha256": sha(1)}])
        return tables({"blobs": {"billing": [_listed("a.bin", actual=sha(0))]}, "records": [
            record(endpoint=reader, topic="invoices", offset=7, message_id="m7", token_id="k7", producer="billing",
                   blobs=blobs) for reader in readers]})

    one, two = state(["shipping"]), state(["shipping", "orders"])
    assert oracle(one, code) == oracle(two, code) and len(oracle(two, code)["billing"]) == 1
    assert found(one, code) == canonical(oracle(one, code))
    assert found(two, code) == canonical(oracle(two, code))


@pytest.mark.unit
def test_an_absolute_uri_outside_the_prefix_names_none_of_its_blobs() -> None:
    """s3://old-bucket/ship/a.bin is not shipping's s3://bucket/ship/a.bin, though its text
    contains the prefix's path: it neither publishes shipping's a.bin (EO401) nor is compared with
    it (EO403)."""
    def state(ref_uri: str):
        blobs = json.dumps([{"uri": ref_uri, "sha256": sha(1)}])
        return tables({"blobs": {"shipping": [_listed("a.bin", actual=sha(0))]}, "records": [
            record(offset=3, message_id="m3", token_id="k3", producer="shipping", blobs=blobs)]})

    inside, outside = state(uri("shipping", "a.bin", True)), state("s3://old-bucket/ship/a.bin")
    # not vacuous: under the prefix, the reference publishes a.bin and is compared with it
    assert oracle(inside, "EO401") == {} and oracle(inside, "EO403")
    assert found(inside, "EO403") == canonical(oracle(inside, "EO403"))
    assert oracle(outside, "EO401") and oracle(outside, "EO403") == {}
    assert (found(outside, "EO401"), found(outside, "EO403")) == (
        canonical(oracle(outside, "EO401")), canonical(oracle(outside, "EO403")))


# ----------------------------------------------------------- the garbage gc-blobs plans from


def garbage(t: CheckTables, *, gc: bool, engine: str = "duckdb", spark: Any = None) -> list[dict[str, Any]]:
    """The garbage blobs of the endpoints with a prefix, by the full classification (what reconcile
    reports: eoctl.expr.reconcile.blob_classes) or by the gc plan's form (garbage_blobs over only
    the record columns its plan keeps, then blob_evidence of its rows), in name order. The gc
    form's own rows (key, collectable) must be its evidence's."""
    import ibis

    from eoctl.expr.reconcile import blob_classes, blob_evidence, garbage_blobs
    from eoctl.expr.records import records_table
    from eoctl.ops.gc_blobs import KIND

    names = list(PREFIXES)

    def in_order(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return sorted(rows, key=lambda r: (r["endpoint"], r["name"]))

    if not gc:
        rows = t.rows_of(lambda scope, dialect: ibis.union(
            *(blob_classes(scope, records_table(), dialect, n) for n in names)), engine, spark)
        return in_order([r for r in rows if r["class"] == "garbage"])
    records = records_table(columns=KIND.record_columns)
    plan = t.rows_of(lambda scope, dialect: garbage_blobs(scope, records, dialect, names), engine, spark)
    rows = in_order(t.rows_of(lambda scope, dialect: blob_evidence(
        scope, garbage_blobs(scope, records, dialect, names), names), engine, spark))
    assert in_order([{k: r[k] for k in ("endpoint", "name", "collectable")} for r in plan]) == [
        {k: r[k] for k in ("endpoint", "name", "collectable")} for r in rows]
    return rows


def with_committed(state: dict[str, Any], commits: list[bool]) -> dict[str, Any]:
    """`state` where the attempts of the blob intents `commits` picks committed their entries: an
    entry of the intent's endpoint for its incoming message, its tokens committed (a pending entry
    of that message keeps the outcome unknown). A blob is lost when every attempt naming it lost."""
    picked = [i for i, c in zip(state["stores"].get("intents", []), commits) if c and i["kind"] == "blob"]
    state["stores"]["outbox"] += [store_row("outbox", i["ep"], incoming_message_id=i["incoming_message_id"],
                                            tokens_committed_at=NOW - dt.timedelta(days=1)) for i in picked]
    return state


@pytest.mark.unit
def test_the_garbage_gc_blobs_plans_from_is_the_classifications_garbage() -> None:
    """gc-blobs keeps its garbage's key, collectable flag and attempt_lost, and gives the rest
    (size, modified, reason, registration, intents) to the rows it shows or quarantines: the same
    rows as the full classification's garbage, over drawn states. Fails, too, when too few states
    have garbage, or none has garbage an intent registered, lost or not."""
    seen = {"states": 0, "with garbage": 0, "registered": 0, "lost": 0}

    @SETTINGS
    @given(state=blob_states(), commits=st.lists(st.booleans(), max_size=5))
    def run(state: dict[str, Any], commits: list[bool]) -> None:
        t = tables(with_committed(state, commits))
        full = garbage(t, gc=False)
        seen["states"] += 1
        seen["with garbage"] += bool(full)
        seen["registered"] += any(r["registered_by"] is not None for r in full)
        seen["lost"] += any(r["reason"].startswith("prepared by attempt") for r in full)
        assert garbage(t, gc=True) == full

    run()
    assert seen["with garbage"] >= max(1, seen["states"] // 10) and all(seen.values()), seen


# ------------------------------------------------------------------------ on Spark, fixed states


def _rich_default() -> dict[str, Any]:
    """Default header and grace, an intents table: every way an old blob is or is not held."""
    old, cutoff = NOW - dt.timedelta(days=3), NOW - DEFAULT_GRACE
    listing = [_listed(n) for n in ("orphan.bin", "rel.bin", "sub/abs.bin", "pend.bin", "pend-abs.bin",
                                    "by-invalid.bin", "by-shipping.bin", "wrong-header.bin", "by-orders-entry.bin",
                                    "lone.bin")]
    listing += [_listed("young.bin", cutoff + dt.timedelta(hours=1)), _listed("at-cutoff.bin", cutoff),
                _listed("just-old.bin", cutoff - dt.timedelta(milliseconds=1)),
                _listed("unhashed.bin", old, None)]

    def published(i, producer, refs, problem=None, readers=("shipping",)):
        return [record(endpoint=r, topic="invoices", partition=1, offset=i, message_id=f"m{i}", token_id=f"k{i}",
                       producer=producer, problem=problem, blobs=json.dumps([{"uri": u, "sha256": s} for u, s in refs]))
                for r in readers]

    records = [
        *published(0, "billing", [("rel.bin", sha(0).upper()), (uri("billing", "sub/abs.bin", True), sha(1)),
                                  ("unhashed.bin", sha(1)), ("gone.bin", sha(2))]),
        *published(1, "billing", [(uri("billing", "gone-abs.bin", True), sha(0))], readers=("shipping", "orders")),
        *published(2, "billing", [("by-invalid.bin", sha(0))], problem="eo-sequence is not an integer"),
        *published(3, "shipping", [("by-shipping.bin", sha(0)), ("a.bin", sha(1)), ("gone.bin", sha(0))]),
        *published(4, None, [("orphan.bin", sha(0))]),
    ]
    lone = store_row("outbox", "billing", incoming_message_id="in-lone", outgoing=outgoing(  # not a JSON list
        {"message_id": "out-lone", "headers": {"eo-blobs": json.dumps({"uri": "lone.bin", "sha256": sha(0)})}}))
    entries = [lone, _entry("billing", "pend.bin", uri("billing", "pend-abs.bin", True)),
               _entry("billing", "wrong-header.bin", header="x-blobs"), _entry("orders", "by-orders-entry.bin"),
               _entry("shipping", uri("shipping", "held.bin", True))]
    intents = [store_row("intents", "billing", intent_id="i0", incoming_message_id="in0", attempt_id="att0",
                         kind="blob", ref="orphan.bin"),
               store_row("intents", "billing", intent_id="i1", incoming_message_id="in1", attempt_id="att1",
                         kind="token", ref="just-old.bin"),
               store_row("intents", "shipping", intent_id="i2", incoming_message_id="in2", attempt_id="att2",
                         kind="blob", ref="b.bin"),
               store_row("intents", "shipping", intent_id="i3", incoming_message_id="in3", attempt_id="att3",
                         kind="blob", ref="wrong-header.bin")]
    return {"records": records, "stores": {"outbox": entries, "intents": intents},
            "blobs": {"billing": listing, "shipping": [_listed("a.bin"), _listed("b.bin"), _listed("held.bin")]}}


def _rich_remapped() -> dict[str, Any]:
    """The blob header renamed, a grace period of one hour, no intents table."""
    cutoff = NOW - dt.timedelta(hours=1)
    records = [record(endpoint="billing", offset=i, message_id=f"m{i}", token_id=f"k{i}", producer="shipping",
                      blobs=json.dumps([{"uri": u, "sha256": s}]))
               for i, (u, s) in enumerate([(uri("shipping", "sub/x.bin", True), sha(1).upper()),
                                           ("y.bin", sha(0).upper()), (uri("shipping", "nope.bin", True), sha(0))])]
    return {"header": "x-blobs", "grace": dt.timedelta(hours=1), "records": records,
            "stores": {"outbox": [_entry("shipping", "held.bin", header="x-blobs"),
                                  _entry("shipping", "not-held.bin", header="eo-blobs")]},
            "blobs": {"shipping": [_listed("sub/x.bin"), _listed("y.bin"), _listed("held.bin"),
                                   _listed("not-held.bin", cutoff - dt.timedelta(seconds=1)),
                                   _listed("young.bin", cutoff + dt.timedelta(seconds=1))]}}


@pytest.mark.unit
@pytest.mark.parametrize("state", [_rich_default, _rich_remapped])
def test_duckdb_finds_what_the_oracle_finds_on_the_rich_states(state) -> None:
    """The fixed states of the Spark test below, on DuckDB alone (its agreement with the oracle)."""
    t = tables(state())
    wrong = {code: differences(found(t, code), canonical(oracle(t, code))) for code in ("EO401", "EO402", "EO403")}
    assert not {code: d for code, d in wrong.items() if d}, "DuckDB (left) and the oracle (right) differ"


@pytest.mark.integration
def test_spark_finds_what_duckdb_and_the_oracle_find_on_rich_states(spark) -> None:
    """EO401-EO403 on Spark and on DuckDB over fixed states reaching every branch: the engines
    agree to the row, and with the oracle."""
    codes = ("EO401", "EO402", "EO403")
    states = [tables(_rich_default()), tables(_rich_remapped())]
    expected = [{code: canonical(oracle(t, code)) for code in codes} for t in states]
    on_spark = [{code: found(t, code, "spark", spark) for code in codes} for t in states]
    on_duckdb = [{code: found(t, code) for code in codes} for t in states]
    assert all(e[code] for e in expected for code in codes)  # not vacuous: every check finds something
    # gc-blobs' form of the classification's garbage (test_the_garbage_gc_blobs_plans_from_...)
    for t in states:
        assert garbage(t, gc=True, engine="spark", spark=spark) == garbage(t, gc=False)
    # state, code, [(endpoint, side, row)]: Spark (left) against DuckDB, then DuckDB against the oracle
    engines = [(i, code, differences(on_spark[i][code], on_duckdb[i][code]))
               for i in range(len(states)) for code in codes]
    assert not [d for d in engines if d[2]], "Spark (left) and DuckDB (right) differ"
    assert not [(i, code, differences(on_duckdb[i][code], expected[i][code]))
                for i in range(len(states)) for code in codes if on_duckdb[i][code] != expected[i][code]], \
        "DuckDB (left) and the oracle (right) differ"

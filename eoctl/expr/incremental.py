"""What each check reads in an incremental audit (`audit --since-last`, eoctl.incremental), written
once for both engines.

Continuing from a recorded run, the engine has three kinds of tables beside the stores:
- `fresh`: the records read from the source this run (RECORD_COLUMNS);
- `indexed`: the recorded index's rows the run takes, `processed` from the current committed offsets;
  `indexed_in_flight` those not processed (read at or past the lowest committed offset, which
  skips the processed row groups: eoctl.incremental.in_flight_floor);
- `state_<name>`: what the recorded run kept of its records for the next one (STATES). These are
  small: the message keys seen more than once, the (producer, sequence) keys on several messages,
  each producer's sequence numbers as ranges, the causations sent under several attempts, the
  token ids the store held, the messages in flight without a held token, the causations pending
  entries named, and the carried records (the processed records of those keys, of header
  problems and of the tokens held: Continuation.carried).

A check is never written twice. Each code's *family* (FAMILY_OF) is the records it is given
instead of every record: the new ones, and the indexed ones whose evidence the new records, the
kept states or the stores as they are now can change. The indexed ones are taken at once
(Continuation.candidates, kept as CANDIDATES with a flag per family) by probing a few key columns
(message id, token id, producer and sequence, causation) for the keys kept first
(Continuation.probe_keys). They are probed in `indexed_reach` when the engine makes it
(Continuation.reach_keys: the carried records, the rows at or past the in-flight floors and the
rows looked up by key, which hold every record a probe can flag), else in every indexed record.
Each family is then a view: its flagged candidates and the new records. The check runs over it as
in a full audit.

Why the findings are the full audit's:
- Each family holds every record of each key it holds. A check groups by that key, so the
  evidence of a key it holds is the full audit's.
- A key whose records are all indexed and not in the family is one the check cannot flag:
  - A message, sequence or causation not in its state had at most one record, message or attempt
    when the recorded run saw it. With no new record it has no more now (retention only takes
    records away).
  - A token or blob that is in no store table and in no record is irrelevant to the checks that
    read them.
  - A processed record whose message has no record in flight is not a loss, nor is a record in
    flight whose token the store holds.
- The states of the next run are the same aggregates over the same families. By induction they
  hold every key of their kind among all the records.

EO104 is the one check whose key (a producer) holds too many records to read again. It reads
`sequence_ranges`: the ranges the recorded run kept, joined with the new numbers' ranges. When
retention took indexed records (`drops`), the ranges are read from every record instead.

EO503 (a processed message without a row in a sink that must hold every message) counts, per hour,
the messages processed in it: a key (an hour) too large to read again as well. Its family is every
record of the messages with a copy processed since the recorded run (new, or indexed beyond the
committed offset it had: Continuation.processed_before), and of those its sinks' states name
(without a row then, or with a row at the mark: eoctl.expr.sink_states). Why that is every
message EO503 can find: a message without a row now whose processed copies were all processed
then had no row then either (rows are only added below the mark, or the count `below` tells),
so it is in the state. Its hours' counts are the kept ones (`effect_hours`) plus the family's
messages with a copy processed since in an hour where they had none then. When that may not hold
(a committed offset moved back, retention took records, a sink's rows below the mark changed,
or a sink without a watermark: `effects_why`), EO503 reads every record, as a full audit.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import ibis

from eoctl.expr import outbox, sink_states, sinks, topics
from eoctl.expr.functions import Dialect, key_hash
from eoctl.expr.inputs import Scope, state_table, store_table
from eoctl.expr.records import RECORD_COLUMNS, records_table
from eoctl.findings import CATALOG

if TYPE_CHECKING:
    import ibis.expr.types as ir

    from eoctl.config.model import SinkConfig

_SEQUENCE = ["endpoint", "topic", "producer", "seq"]
_CAUSATION = ["producer", "causation_id"]


@dataclass(frozen=True)
class State:
    """What a recorded run keeps for the next: `build` (a run's Continuation, its scope, dialect)
    gives its rows; `family`: the records it is built over (None: none of them: EO104's ranges, a
    sink's states). `shared`: the name of a table the run keeps (eoctl.expr.catalog.shared_tables,
    a sink's mark) holding the same rows, when the run computed it anyway."""

    schema: Mapping[str, object]  # column -> Ibis type
    family: str | None
    build: Callable[[Continuation, Scope, Dialect], ir.Table]
    shared: str


def _over(family: str, aggregate: Callable[[ir.Table, Dialect], ir.Table],
          ) -> Callable[[Continuation, Scope, Dialect], ir.Table]:
    """A state built by `aggregate` over the records of `family`."""
    return lambda c, scope, dialect: aggregate(c.records_in(family), dialect)


STATES: dict[str, State] = {
    "repeated_keys": State({"endpoint": "string", "topic": "string", "message_id": "string"}, "messages",
                           _over("messages", topics.repeated_keys), "repeated_keys"),
    "reused_sequence_keys": State({"endpoint": "string", "topic": "string", "producer": "string", "seq": "int64"},
                                  "sequences", _over("sequences", topics.reused_sequence_keys), "reused_sequence_keys"),
    "sequence_ranges": State(topics.RANGES_SCHEMA, None, lambda c, scope, dialect: c.ranges(dialect),
                             "sequence_ranges"),
    "causations_sent_twice": State({"producer": "string", "causation_id": "string"}, "causations",
                                   _over("causations", outbox.causations_sent_twice), ""),
    # what lets the next run read the index narrowly (Continuation.reach_keys): the keys the stores
    # name whose records this run carries, looked up again only when new
    "store_tokens_seen": State({"token_id": "string"}, None, lambda c, scope, dialect: _store_tokens(), ""),
    "unheld_messages": State({"message_id": "string"}, None, lambda c, scope, dialect: c.unheld(), "records_unheld"),
    "pending_causations": State({"causation_id": "string"}, None,
                                lambda c, scope, dialect: _pending_causations(scope).select("causation_id").distinct(),
                                ""),
    "carried_records": State(dict(zip(RECORD_COLUMNS, records_table().schema().types)), None,
                             lambda c, scope, dialect: c.carried(scope, dialect), ""),
}

#: the states a narrow read of the index needs beside those of the families' probes
_REACH_STATES = frozenset({"store_tokens_seen", "unheld_messages", "pending_causations", "carried_records",
                           "repeated_keys", "reused_sequence_keys", "causations_sent_twice"})

#: each code that reads records -> the family of records it is given (CodeInfo.family); a code not
#: named here reads none (store tables, sinks, listings, offsets)
FAMILY_OF = {code: info.family for code, info in CATALOG.items() if info.family}
#: the family of a check that reads its sinks' kept effects (EO503's states) too
EFFECTS = "effects"


def states(scope: Scope) -> dict[str, State]:
    """Every state a recorded run keeps: STATES, and those of each sink with a watermark column
    (eoctl.expr.sink_states), named after its configuration."""
    out = dict(STATES)
    for endpoint, sink in sink_states.watermarked(scope):
        out[sink_states.mark_state(endpoint, sink)] = State(
            sink_states.MARK_SCHEMA, None,
            lambda c, scope, dialect, e=endpoint, s=sink: sink_states.mark(scope, e, s, dialect),
            sink_states.mark_view(scope, endpoint, sink))
        out[sink_states.applied_twice_state(endpoint, sink)] = State(
            sink_states.APPLIED_TWICE_SCHEMA, None,
            lambda c, scope, dialect, e=endpoint, s=sink: sink_states.applied_twice(c.narrowed_scope(scope, sink_states.by_message_view), e, s),
            sinks.applied_twice_view(scope, endpoint, sink))
        if sink.key_columns:
            view = sinks.differing_keys_view(scope, endpoint, sink)
            out[sink_states.differing_keys_state(endpoint, sink)] = State(
                sink_states.key_schema(scope, endpoint, sink), None,
                lambda c, scope, dialect, v=view: sinks.differing_keys(c.narrowed_scope(scope, sink_states.by_key_view), dialect)[v], view)
    if sinks.effect_endpoints(scope):
        out[EFFECT_HOURS] = State(sinks.EFFECT_HOURS_SCHEMA, None, lambda c, scope, dialect: c.effect_hours(scope),
                                  sinks.EFFECT_HOURS)
    for endpoint, sink in _effect_sinks(scope):
        without = sinks.without_effect_view(scope, endpoint, sink)
        out[sink_states.without_state(endpoint, sink)] = State(
            sink_states.IDS_SCHEMA, None, lambda c, scope, dialect, v=without: c.without_effect(scope)[v], without)
        out[sink_states.edge_state(endpoint, sink)] = State(
            sink_states.IDS_SCHEMA, None,
            lambda c, scope, dialect, e=endpoint, s=sink: sink_states.edge(scope, e, s, dialect, c.kept_mark(e, s)),
            sink_states.edge_view(scope, endpoint, sink))
        out[sink_states.below_state(endpoint, sink)] = State(
            sink_states.ROWS_SCHEMA, None, lambda c, scope, dialect, e=endpoint, s=sink: sink_states.below(scope, e, s),
            "")
    return out


#: the state of EO503's counts of each hour's processed messages
EFFECT_HOURS = "effect_hours"


def _effect_sinks(scope: Scope) -> list[tuple[str, SinkConfig]]:
    """The sinks that must hold every message whose watermark can be kept: those EO503 reads by state."""
    return [(e, s) for e, s in sink_states.watermarked(scope) if s.every_message]


@dataclass(frozen=True)
class Probe:
    """Which indexed records a family takes: those meeting `where`, or those whose `on` columns
    are a row of `keys` (kept first, distinct: probe_table). Neither: every indexed record."""

    where: ir.BooleanValue | None = None
    keys: ir.Table | None = None
    on: tuple[str, ...] = ()
    #: the columns of `on` a coarse filter hashes (default all): a part of the key nearly as
    #: selective and cheaper to hash, the join on `on` then being exact
    coarse_on: tuple[str, ...] = ()


def probe_table(family: str) -> str:
    """The kept table of the keys a family's probe looks for."""
    return f"records_probe_{family}"


#: the kept table of the indexed records any family takes, with a flag per family
CANDIDATES = "records_candidates"
#: the indexed records a probe can flag, when the engine reads the index narrowly (reach_keys)
REACH = "indexed_reach"
#: the kept table of the message ids in flight without a held token (Continuation.unheld), when
#: continuing: read by the look-ups, the messages' probe, the sinks' touched ids and the next state
UNHELD = STATES["unheld_messages"].shared


def _unheld_kept() -> ir.Table:
    return ibis.table(ibis.schema(STATES["unheld_messages"].schema), name=UNHELD)


def family_view(family: str) -> str:
    return f"records_{family}"


def _state(name: str) -> ir.Table:
    return state_table(name, STATES[name].schema)


@dataclass(frozen=True)
class Continuation:
    """An incremental audit's plan: which states the recorded run kept (`states`), and whether
    retention took indexed records since (`drops`). Without a base run (`continuing` False), every
    family is every record: the states are computed whole for the next run."""

    continuing: bool = True
    states: frozenset[str] = frozenset(STATES)
    drops: bool = False
    keeps: bool = True  # the run keeps an index, and so the states for the next run
    #: each narrowed sink's mark as the recorded run kept it (its state's name -> the integer, None:
    #: the sink was empty), read before the sink's tables are built (Continuation.mark_queries)
    sink_marks: tuple[tuple[str, int | None], ...] = ()
    #: the engine made `indexed_reach` (narrows, reach_keys): the candidates are probed in it
    reached: bool = False
    #: per indexed partition (endpoint, topic, partition, offset): below the offset, its indexed
    #: records were processed for the recorded run (eoctl.incremental.processed_bounds); None:
    #: that may not hold now (EO503 reads every record)
    processed_below: tuple[tuple[str, str, int, int], ...] | None = None
    #: why EO503's family is every record (None: the records of the messages processed since and
    #: its states', see the module's doc), decided once the marks are read (audit._continue)
    effects_why: str | None = "not decided"

    @property
    def effects(self) -> bool:
        """Whether EO503 reads the records of the messages processed since (and its states')."""
        return self.continuing and self.effects_why is None

    def effects_blocked(self, scope: Scope) -> str | None:
        """Why EO503 cannot continue from the states, as far as the plan tells (the sinks' rows
        below their marks are counted next: effect_guards); None: it can."""
        every = list(sinks.every_message_sinks(scope))
        usable = {(e, s.name) for e, s in self.narrowed(scope)
                  if set(sink_states.effect_state_names(e, s)) <= self.states}
        watermarked = {(n, k.name) for n, k in sink_states.watermarked(scope)}
        for e, s in every:
            if (e, s.name) not in watermarked:
                return (f"sink {e}/{s.name} has no watermark_column of an integer or a time: only every record "
                        "shows a row deleted from it")
        if self.drops:
            return "retention took indexed records since the last run"
        if self.processed_below is None:
            return "a committed offset moved back or is gone since the last run"
        if EFFECT_HOURS not in self.states or any((e, s.name) not in usable for e, s in every):
            return "the last run kept no state for these sinks' configuration"
        return None

    def effect_guards(self, scope: Scope, dialect: Dialect) -> dict[str, ir.Table]:
        """Per sink EO503 reads by state, by its name ("<endpoint>/<sink>"): one row of how many
        rows are below the recorded run's mark now and how many were then (sink_states.below_now)."""
        return {f"{e}/{s.name}": sink_states.below_now(scope, e, s, dialect, self.kept_mark(e, s))
                for e, s in _effect_sinks(scope)}

    def processed_before(self, t: ir.Table) -> ir.BooleanValue:
        """Whether a record of `t` is an indexed one the recorded run had processed (processed_below)."""
        cases = [((t.endpoint == e) & (t.topic == topic) & (t.partition == partition), t.offset < bound)
                 for e, topic, partition, bound in self.processed_below or ()]
        return ibis.cases(*cases, else_=ibis.literal(False)) if cases else ibis.literal(False)

    def effect_keys(self, scope: Scope, fresh: ir.Table, indexed: ir.Table, carried: bool = True) -> ir.Table:
        """The message ids EO503's family holds every record of (continuing, `effects`): those with
        a copy processed since the recorded run (new, or indexed and not processed then), and those
        its sinks' states name (with a row at the mark then, and with `carried` those without a
        row: the recorded run carried their processed records, carried_records)."""
        endpoints = sinks.effect_endpoints(scope)

        def processed(t: ir.Table) -> ir.Table:
            return t.filter(t.endpoint.isin(endpoints) & t.processed & t.message_id.notnull() & t.problem.isnull())

        lowest = min((bound for *_, bound in self.processed_below or ()), default=0)
        # offsets below every bound were processed then: Parquet skips their row groups
        since = processed(indexed.filter(indexed.offset >= lowest))
        ids = processed(fresh).select("message_id").union(since.filter(~self.processed_before(since)).select("message_id"))
        for e, s in _effect_sinks(scope):
            names = (sink_states.without_state(e, s), sink_states.edge_state(e, s)) if carried else (
                sink_states.edge_state(e, s),)
            for name in names:
                ids = ids.union(state_table(name, sink_states.IDS_SCHEMA))
        return ids.filter(ids.message_id.notnull())

    def effect_hours(self, scope: Scope) -> ir.Table:
        """`effect_hours` (EO503's counts of each hour's processed messages): the kept counts and the
        messages processed since (effects), else over every record."""
        records = self.records_in(EFFECTS)
        if self.effects:
            kept = state_table(EFFECT_HOURS, sinks.EFFECT_HOURS_SCHEMA)
            return sinks.processed_per_hour(scope, records, self.processed_before, kept)
        return sinks.processed_per_hour(scope, records)

    def without_effect(self, scope: Scope) -> dict[str, ir.Table]:
        """Per sink that must hold every message, its messages processed without a row (EO503's,
        kept before it runs, and the `without` state): over EO503's records and rows."""
        return sinks.messages_without_effect(self.effects_scope(scope), self.records_in(EFFECTS))

    def families(self, codes: Iterable[str], scope: Scope) -> list[str]:
        """The families `codes` read, and those the states are built from, in a fixed order."""
        wanted = {FAMILY_OF[c] for c in codes if c in FAMILY_OF}
        if self.keeps:  # the states' families, and those the carried records are taken from
            wanted |= {s.family for s in STATES.values() if s.family} | set(_CARRIED_FAMILIES)
            wanted.add(EFFECTS)  # effect_hours and the sinks' `no_row`
        if not (self.effects and sinks.effect_endpoints(scope)):
            wanted.discard(EFFECTS)  # EO503 reads every record (records_in), or has no sink
        return sorted(wanted)

    def records_of(self, code: str) -> ir.Table:
        """The records `code` reads: its family's kept table, or every record."""
        family = FAMILY_OF.get(code)
        return self.records_in(family) if family else records_table()

    def records_in(self, family: str) -> ir.Table:
        """The kept table of a family's records when continuing, else every record (and EO503's
        when it cannot continue from the states: effects_why)."""
        if family == EFFECTS and not self.effects:
            return records_table()
        return records_table(family_view(family)) if self.continuing else records_table()

    def probe_keys(self, families: Iterable[str], scope: Scope, dialect: Dialect) -> dict[str, ir.Table]:
        """The keys of each family's probe that looks for keys (probe_table), by name: kept before
        the candidates. A kept table is planned by its real size: Spark broadcasts a few hundred
        thousand ids to the scan of the index instead of shuffling every indexed record to meet
        them (16 of the 21 s of a 10M-record run)."""
        out = {}
        for name in families:
            if name in _PROBES:
                probe = _PROBES[name](self, scope, records_table("fresh"), records_table("indexed"), dialect)
                if probe.keys is not None:
                    out[probe_table(name)] = probe.keys.select(*probe.on).distinct()
        return out

    def candidates(self, families: Iterable[str], scope: Scope, dialect: Dialect) -> ir.Table:
        """The indexed records any of `families` takes, each with a flag per family: one scan of
        the index, every probe in it (CANDIDATES), the probes' keys read from their kept tables."""
        t = records_table(REACH if self.reached else "indexed")
        fresh = records_table("fresh")
        flags = []
        # the probes that join on several columns last: Spark moves the filter of the flags below
        # the flags computed after the last join and then computes each of those twice (a second
        # join of every indexed row with the probe's keys: 1-2 s at 10M records)
        probes = {n: _PROBES[n](self, scope, fresh, t, dialect) for n in families if n in _PROBES}
        names = sorted(probes, key=lambda n: len(probes[n].on) > 1)
        if dialect is Dialect.spark and not self.reached:
            # every indexed row: first met by the 64-bit hashes of its keys, then exactly (below)
            # only the rows that may match. Spark's join of a text key costs about twice one of
            # a number, and each exact join carries every column of every row.
            t = t.filter(ibis.or_(*[_coarse(t, n, probes[n], dialect) for n in names]))
        for name in names:  # each probe again over `t` as it is now (its condition names its columns)
            probe = _PROBES[name](self, scope, fresh, t, dialect)
            flag = _flag(name)
            if probe.keys is not None:
                keys = ibis.table(probe.keys.select(*probe.on).schema(), name=probe_table(name))
                if len(probe.on) == 1:
                    t = t.mutate(**{flag: t[probe.on[0]].isin(keys[probe.on[0]])})
                else:
                    marked = keys.mutate(**{flag: ibis.literal(True)})
                    t = t.left_join(marked, list(probe.on)).select(*t.columns, flag)
                    t = t.mutate(**{flag: t[flag].fill_null(False)})
            else:
                t = t.mutate(**{flag: probe.where if probe.where is not None else ibis.literal(True)})
            flags.append(t[flag])
        return t.filter(ibis.or_(*flags)) if flags else t.filter(ibis.literal(False))

    def narrows(self, families: Iterable[str]) -> bool:
        """Whether the candidates are probed in `indexed_reach` (reach_keys) instead of every
        indexed record: the recorded run kept what the reach needs and retention took no indexed
        record."""
        return (self.continuing and not self.drops and _REACH_STATES <= self.states
                and set(families) <= set(_REACHED_FAMILIES))

    def reach_keys(self, families: Iterable[str], scope: Scope) -> dict[str, ir.Table | None]:
        """The keys the engine looks up in the index's key columns for `indexed_reach`, by the
        column(s) they are of: the new records' message ids and (producer, sequence) keys, the
        tokens the store holds that it did not hold for the recorded run, and the causations the
        new records or pending entries name, and the records that publish blobs. With the
        carried records (`state_carried_records`: the processed records of the keys the states
        name, of problems and of tokens the store held) and the index's rows at or past the lower of the two runs' in-flight floors, these
        hold every indexed record a probe can flag:
        - messages: a new id is looked up, and so is one with a record in flight now whose token
          the store does not hold (an EO202 loss unless the message has a processed record) unless
          the recorded run saw it so (unheld_messages: carried); an id of a message seen more than
          once (repeated_keys) is carried or recent;
        - sequences: a new key is looked up; a reused one is carried or recent;
        - problems: carried or recent;
        - tokens: a token the store held for the recorded run was in its tokens family, so its
          records are carried or recent; any other is looked up;
        - causations: one sent twice, or named by a pending entry for the recorded run
          (pending_causations), is carried or recent; the others are looked up;
        - blobs: every record with a `blobs` header is looked up (None: the column not null).
        A record in flight for the recorded run (not carried) is at or past its in-flight floor,
        and so is every record in flight now: the look-ups need only find the rows below the lower
        floor."""
        fresh = records_table("fresh")
        unheld = _unheld_kept().anti_join(_state("unheld_messages"), "message_id")
        ids = fresh.select("message_id").union(unheld)
        if EFFECTS in families:  # every record of EO503's messages, their other copies looked up
            ids = ids.union(self.effect_keys(scope, fresh, records_table("indexed"), carried=False))
        out: dict[str, ir.Table | None] = {"message_id": ids.filter(ids.message_id.notnull()).distinct()}
        v = _valid(fresh)
        out[",".join(_SEQUENCE)] = v.filter(v.producer.notnull() & v.seq.notnull()).select(*_SEQUENCE).distinct()
        seen = _state("store_tokens_seen")
        out["token_id"] = _store_tokens().anti_join(seen, "token_id")
        if "causations" in families:
            pending = _pending_causations(scope).anti_join(_state("pending_causations"), "causation_id")
            out["causation_id"] = _causations_now(scope, fresh, pending).select("causation_id").distinct()
        if "blobs" in families:  # every record that publishes blobs: usually a few
            out["blobs"] = None
        return out

    def unheld(self) -> ir.Table:
        """`unheld_messages` for the next run: the message ids of the records in flight now
        (new or indexed) whose token their endpoint's store does not hold. Each is a key of the
        messages family (its probe takes them all), so the carried records hold its processed
        records and the next run looks it up only if it is not here. Continuing, kept first as
        UNHELD: EO202's losses are among these, and the narrowed sinks' rows hold theirs."""
        if not self.continuing:
            return _unheld(records_table()).distinct()
        return _unheld(records_table("fresh")).union(_unheld(records_table("indexed_in_flight"))).distinct()

    def carried(self, scope: Scope, dialect: Dialect) -> ir.Table:
        """`carried_records` for the next run: the processed records (new or indexed) of the
        message keys seen twice or in flight without a held token (unheld), the reused (producer,
        sequence) keys, the causations sent twice or named by a pending entry, with a header
        problem, carrying a token the store holds, or of a message processed without a row in a
        sink that must hold every message (EO503's `no_row`): those the next run's
        probes can flag below its in-flight floors without a new key. Each is in a family that
        holds every record of its key, so the new records and the candidates hold them all (every
        record, without a base, or when EO503 read every record). The keys are this run's states,
        kept before (next_state_table). A (producer, sequence) key is met by its hash64: a
        collision only carries a record more."""
        columns = RECORD_COLUMNS
        without = [ibis.table(ibis.schema(sink_states.IDS_SCHEMA), name=next_state_table(name))
                   for name in carried_from(scope)[len(CARRIED_FROM):]]
        if self.continuing and (self.effects or not without):
            # with a flag it has (a run that keeps states takes the messages family), so that the
            # select names the columns: the table has a flag per family
            kept = ibis.table(ibis.schema({**records_table().schema(), _flag("messages"): "boolean"}),
                              name=CANDIDATES)
            rows = records_table("fresh").union(kept.select(*columns))
        else:
            rows = records_table()
        def kept_state(name: str) -> ir.Table:
            return ibis.table(ibis.schema(STATES[name].schema), name=next_state_table(name))
        reused = kept_state("reused_sequence_keys")
        reused = reused.select(_key=key_hash(reused, _SEQUENCE, dialect))
        twice = kept_state("causations_sent_twice")
        carried = (rows.message_id.isin(kept_state("repeated_keys").message_id) | rows.problem.notnull()
                   | rows.message_id.isin(kept_state("unheld_messages").message_id)
                   | rows.token_id.isin(_store_tokens().token_id) | key_hash(rows, _SEQUENCE, dialect).isin(reused._key)
                   | rows.causation_id.isin(twice.causation_id)
                   | rows.causation_id.isin(kept_state("pending_causations").causation_id))
        for ids in without:
            carried |= rows.message_id.isin(ids.message_id)
        return rows.filter(rows.processed & carried).select(*columns)

    def family(self, name: str, scope: Scope, dialect: Dialect) -> ir.Table:
        """The records of family `name` (RECORD_COLUMNS): the new ones and the indexed ones it
        takes (from CANDIDATES, kept before)."""
        from eoctl.expr.records import RECORD_COLUMNS

        if not self.continuing:
            return records_table()
        kept = ibis.table(ibis.schema({**records_table().schema(), _flag(name): "boolean"}), name=CANDIDATES)
        return records_table("fresh").union(kept.filter(kept[_flag(name)]).select(*RECORD_COLUMNS))

    def ranges(self, dialect: Dialect) -> ir.Table:
        """`sequence_ranges` (EO104's table): the kept ranges joined with the new numbers' ranges,
        or every record's when there is no state to continue or retention took indexed records."""
        if not self.continuing or self.drops or "sequence_ranges" not in self.states:
            return topics.sequence_ranges(records_table(), dialect)
        return topics.coalesce_ranges(topics.number_runs(records_table("fresh"), dialect).union(
            _state("sequence_ranges")))

    def narrowed(self, scope: Scope) -> list[tuple[str, SinkConfig]]:
        """The sinks whose EO501 and EO502 read the rows of the groups new rows or the kept states
        name (eoctl.expr.sink_states): those with a watermark column and every state kept."""
        if not self.continuing:
            return []
        return [(e, s) for e, s in sink_states.watermarked(scope) if set(sink_states.state_names(e, s)) <= self.states]

    def scope_for(self, code: str, scope: Scope) -> Scope:
        """The scope `code`'s check reads: the effects' (effects_scope), or its narrowed sinks as
        the view it declares (CodeInfo.narrowed_view; EO202's losses are messages in flight without
        a held token: UNHELD, touched)."""
        if FAMILY_OF.get(code) == EFFECTS:
            return self.effects_scope(scope)
        view = CATALOG[code].narrowed_view
        return self.narrowed_scope(scope, getattr(sink_states, f"{view}_view")) if view else scope

    def effects_scope(self, scope: Scope) -> Scope:
        """What a check of the effects family reads: the kept tables, and the rows of its
        messages (effects) or the sinks."""
        rows = {(e, s.name): sink_states.by_message_view(scope, e, s) for e, s in _effect_sinks(scope)}
        return replace(scope, kept_effects=True, narrowed_sinks={**scope.narrowed_sinks, **rows}
                       if self.effects else scope.narrowed_sinks)

    def narrowed_scope(self, scope: Scope, view: Callable[[Scope, str, SinkConfig], str]) -> Scope:
        """`scope` with each narrowed sink read as its `view` (eoctl.expr.sink_states)."""
        narrowed = self.narrowed(scope)
        if not narrowed:
            return scope
        return replace(scope, narrowed_sinks={(e, s.name): view(scope, e, s) for e, s in narrowed})

    def mark_queries(self, scope: Scope) -> dict[str, ir.Table]:
        """The one-row tables of the narrowed sinks' kept marks, by state name: read into
        `sink_marks` before sink_tables builds its expressions."""
        return {name: state_table(name, sink_states.MARK_SCHEMA).aggregate(mark=lambda t: t.mark.max())
                for name in (sink_states.mark_state(e, s) for e, s in self.narrowed(scope))}

    def sink_tables(self, scope: Scope, dialect: Dialect) -> dict[str, ir.Table]:
        """The tables of the narrowed sinks EO501 and EO502 read, by name, each kept in this order:
        the message ids and keys they look for, then the rows of either, in one scan of the sink.
        Kept, not views: a check's filter over a view of the sink's rows changed the engine's plan
        of its scan (DuckDB built its join of the sink's every row: 0.9 s instead of 0.5 s at 10M
        rows), and on Spark each reader of a view scanned the sink again."""
        out: dict[str, ir.Table] = {}
        for e, s in self.narrowed(scope):
            new = sink_states.new_rows(scope, e, s, dialect, self.kept_mark(e, s))
            messages = _unheld_kept()
            if self.effects and s.every_message:  # EO503's messages (its family's probe keys)
                messages = messages.union(ibis.table(ibis.schema(sink_states.IDS_SCHEMA), name=probe_table(EFFECTS)))
            out[sink_states.touched_view(scope, e, s)] = sink_states.touched(scope, e, s, new, messages)
            out[sink_states.touched_rows_view(scope, e, s)] = sink_states.touched_rows(scope, e, s, dialect)
        return out

    def sink_views(self, scope: Scope) -> dict[str, ir.Table]:
        """The views EO501 and EO502 read of the narrowed sinks, by name: filters of the kept
        `sink_tables`, each a few groups' rows."""
        out: dict[str, ir.Table] = {}
        for e, s in self.narrowed(scope):
            out[sink_states.by_message_view(scope, e, s)] = sink_states.by_message(scope, e, s)
            if s.key_columns:
                out[sink_states.by_key_view(scope, e, s)] = sink_states.by_key(scope, e, s)
        return out

    def marks(self, scope: Scope, dialect: Dialect) -> dict[str, ir.Table]:
        """Each watermarked sink's highest watermark, kept before any check reads the sink (the
        next run's mark), by name; none when the run keeps no states."""
        if not self.keeps:
            return {}
        out = {sink_states.mark_view(scope, e, s): sink_states.mark(scope, e, s, dialect, self.kept_mark(e, s))
               for e, s in sink_states.watermarked(scope)}
        for e, s in _effect_sinks(scope):  # EO503's rows at the mark and the count, read with it
            out[sink_states.edge_view(scope, e, s)] = sink_states.edge(scope, e, s, dialect, self.kept_mark(e, s))
            out[sink_states.count_view(scope, e, s)] = sink_states.row_count(scope, e, s)
        return out

    def kept_mark(self, endpoint: str, sink: SinkConfig) -> int | None:
        """The mark the recorded run kept for a narrowed sink (read into `sink_marks`); None for
        another sink, or one that was empty then."""
        return dict(self.sink_marks).get(sink_states.mark_state(endpoint, sink))

    def sink_reads(self, scope: Scope) -> dict[str, str]:
        """How EO501 and EO502 read each sink with a watermark column ("<endpoint>/<sink>" -> why
        whole, or "new rows"), for run.scan."""
        narrowed = {(e, s.name) for e, s in self.narrowed(scope)}
        usable = {(e, s.name) for e, s in sink_states.watermarked(scope)}
        out = {}
        for name, ep in scope.endpoints.items():
            for sink in ep.sinks:
                if not sink.watermark_column or (name, sink.name) not in scope.sink_schemas:
                    continue
                if (name, sink.name) in narrowed:
                    out[f"{name}/{sink.name}"] = "new rows and the rows of the groups they or the states name"
                elif (name, sink.name) not in usable:
                    kind = sink_states.watermark_type(scope, name, sink)
                    out[f"{name}/{sink.name}"] = (f"whole: its watermark_column {sink.watermark_column} holds {kind}, "
                                                  "not an integer or a time")
                else:
                    out[f"{name}/{sink.name}"] = "whole: the last run kept no state for this sink's configuration"
        return out

    def keys(self, name: str, fresh_keys: ir.Table) -> ir.Table:
        """`fresh_keys` and the kept state `name` (when the recorded run kept it)."""
        if name in self.states:
            return fresh_keys.union(_state(name)).distinct()
        return fresh_keys.distinct()


def _coarse(t: ir.Table, name: str, probe: Probe, dialect: Dialect) -> ir.BooleanValue:
    """True for every row of `t` a probe takes, and for a few it does not (a hash collision):
    the hash of the row's key among the hashes of the probe's keys, or its condition."""
    if probe.keys is None:
        return probe.where if probe.where is not None else ibis.literal(True)
    keys = ibis.table(probe.keys.select(*probe.on).schema(), name=probe_table(name))
    on = probe.coarse_on or probe.on
    return key_hash(t, on, dialect).isin(key_hash(keys, on, dialect))


def _store_tokens() -> ir.Table:
    t = store_table("tokens")
    return t.filter(t.token_id.notnull()).select("token_id").distinct()


#: the families whose records the carried records are taken from
_CARRIED_FAMILIES = ("messages", "sequences", "problems", "tokens", "causations")
#: the states carried_records reads, kept as tables before it is built (next_state_table)
CARRIED_FROM = ("repeated_keys", "reused_sequence_keys", "causations_sent_twice", "unheld_messages",
                "pending_causations")


def carried_from(scope: Scope) -> tuple[str, ...]:
    """The states carried_records reads: CARRIED_FROM, then each EO503 sink's `without`."""
    return CARRIED_FROM + tuple(sink_states.without_state(e, s) for e, s in _effect_sinks(scope))


def next_state_table(name: str) -> str:
    """The table a state for the next run is kept as before it is written (CARRIED_FROM)."""
    return f"next_{name}"


def _waiting(t: ir.Table) -> ir.Table:
    """The message ids of `t`'s records in flight with a token."""
    return t.filter(~t.processed & t.token_id.notnull()).select("message_id")


def _unheld(t: ir.Table) -> ir.Table:
    """The message ids of `t`'s records in flight whose token their endpoint's store does not hold:
    the only in-flight records EO202 can flag. Another in-flight record is no loss, and its
    message's other records are in the family already when EO101 or EO102 can flag them (a new
    record of it, or seen twice on its topic: repeated_keys). Usually a few of those in flight, a
    store holding the tokens of what is in flight: at 10M + 1%, 19,866 of 131,960."""
    waiting = t.filter(~t.processed & t.token_id.notnull())
    held = store_table("tokens")
    return waiting.anti_join(held, [waiting.endpoint == held.ep, waiting.token_id == held.token_id]
                             ).select("message_id")


#: the families whose indexed records indexed_reach holds
_REACHED_FAMILIES = (*_CARRIED_FAMILIES, "blobs", EFFECTS)


def _valid(t: ir.Table) -> ir.Table:
    return t.filter(t.problem.isnull())


def _flag(family: str) -> str:
    return f"_in_{family}"


def _messages(c: Continuation, scope: Scope, fresh: ir.Table, indexed: ir.Table, dialect: Dialect) -> Probe:
    """EO101, EO102, EO202: every record of the messages with a new record, seen twice before,
    or with a record in flight now (offsets at or past the committed offset, which may have moved
    either way) whose token the store does not hold (_unheld). Probed by the message id alone: a
    group of any endpoint and topic that holds the id is then whole."""
    if "repeated_keys" not in c.states:
        return Probe()  # nothing says which indexed messages were seen twice: all of them
    ids = _valid(fresh).select("message_id").union(_state("repeated_keys").select("message_id"))
    # of the index's records in flight, those without a held token (kept as UNHELD)
    ids = ids.union(_waiting(fresh)).union(_unheld_kept())
    return Probe(keys=ids, on=("message_id",))


def _sequences(c: Continuation, scope: Scope, fresh: ir.Table, indexed: ir.Table, dialect: Dialect) -> Probe:
    """EO103: every record of the (producer, sequence) keys with a new record or on several
    messages before."""
    if "reused_sequence_keys" not in c.states:
        return Probe()
    v = _valid(fresh)
    keys = c.keys("reused_sequence_keys", v.filter(v.producer.notnull() & v.seq.notnull()).select(*_SEQUENCE))
    # hashed without the endpoint and topic, whose text made the hash of every indexed row cost
    # twice as much (Spark, 10M rows: 2.1 s against 1.0 s); a producer's numbers are its own
    return Probe(keys=keys, on=tuple(_SEQUENCE), coarse_on=("producer", "seq"))


def _problems(c: Continuation, scope: Scope, fresh: ir.Table, indexed: ir.Table, dialect: Dialect) -> Probe:
    """EO105: the indexed records without usable protocol headers (usually none)."""
    return Probe(where=indexed.problem.notnull())


def _tokens(c: Continuation, scope: Scope, fresh: ir.Table, indexed: ir.Table, dialect: Dialect) -> Probe:
    """EO201, EO203: the indexed records that carry a token the store holds now."""
    return Probe(where=indexed.token_id.isin(store_table("tokens").token_id))


def _causations(c: Continuation, scope: Scope, fresh: ir.Table, indexed: ir.Table, dialect: Dialect) -> Probe:
    """EO302: every record of the causations with a new record, sent under several attempts
    before, or named by a pending entry now. By the causation alone: a (producer, causation)
    group that holds it is then whole."""
    if "causations_sent_twice" not in c.states:
        return Probe()
    return Probe(keys=c.keys("causations_sent_twice", _causations_now(scope, fresh)), on=("causation_id",))


def _causations_now(scope: Scope, fresh: ir.Table, pending: ir.Table | None = None) -> ir.Table:
    """(producer, causation_id) the new records send or a pending entry names (`pending`: those
    entries' causations, if not every one)."""
    pending = _pending_causations(scope) if pending is None else pending
    return outbox._sent_with_causation(fresh).select(*_CAUSATION).union(pending.select(*_CAUSATION))


def _pending_causations(scope: Scope) -> ir.Table:
    """(producer, causation_id) a pending entry of the outbox names (its attempt under way)."""
    entries = store_table("outbox")
    return entries.filter(entries.attempt_id.notnull()).select(
        producer=scope.as_producer(entries.ep), causation_id=entries.incoming_message_id)


def _blobs(c: Continuation, scope: Scope, fresh: ir.Table, indexed: ir.Table, dialect: Dialect) -> Probe:
    """EO401-EO403: the indexed records that publish blobs."""
    return Probe(where=indexed.blobs.notnull())


def _effects(c: Continuation, scope: Scope, fresh: ir.Table, indexed: ir.Table, dialect: Dialect) -> Probe:
    """EO503: every record of the messages processed since the recorded run and of those its
    sinks' states name (Continuation.effect_keys), by the message id alone. (When it cannot
    continue from them, EO503 reads every record, not a family: Continuation.records_in.)"""
    return Probe(keys=c.effect_keys(scope, fresh, records_table("indexed")), on=("message_id",))


_PROBES = {"messages": _messages, "sequences": _sequences, "problems": _problems, "tokens": _tokens,
           "causations": _causations, "blobs": _blobs, EFFECTS: _effects}

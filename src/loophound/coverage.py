"""What a scan could judge, so that no verdict says more than the logs allowed.

A detector can only find a loop in events that carry what it reads: repeated_error needs a
time, an error and who it was returned to; ping_pong a sender and a receiver; and so on (each
detector declares it: `Detector.needs`). A log whose fields loophound could not interpret
(only a time and a `type` guessed) yields no finding because nothing could be judged, not
because nothing looped. This module measures, per input, the share of events that carry
each canonical field and, per detector, how many events it could judge; and decides the
verdict:

- `findings`: at least one finding;
- `clean`: no finding, and every input that was read could be judged (its events carry a
  time and who acted, and some detector could read them), and no log was skipped;
- `inconclusive`: no finding, but some input could not be judged, or a log was skipped: the
  coverage names them, the fields that were missing and the mapping keys that would fill them.

Measuring (SQL over the views) is apart from judging (`verdict`, pure, unit-tested).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import duckdb

from .db import sql_literal
from .detect import DETECTORS
from .schema import COSTLY_TO_READ
from .store import events_of_kinds
from .vocabulary import Verdict

# the canonical fields a reader (and the detectors) rely on, as SQL conditions over `events`
FIELDS = {
    "time": "ts IS NOT NULL",
    "actor": "actor IS NOT NULL",
    "session": "session IS NOT NULL",
    "target": "target IS NOT NULL",
    "action": "action IS NOT NULL",
    "outcome": "(ok IS NOT NULL OR error IS NOT NULL)",
    "arguments": "args IS NOT NULL",
}
UNDERSTOOD = 0.5  # an input is judged when this share of its events has a time and who acted


@dataclass
class InputCoverage:
    input_id: int
    path: str
    format: str
    events: int
    shares: dict[str, float]  # field → share of events carrying it
    judged_by: dict[str, int] = field(default_factory=dict)  # detector → events it could judge
    keys: list[str] = field(default_factory=list)  # fields of the lines no column holds
    actions: int = 0  # events of kinds some detector reads (the rest: summaries, metrics)

    @property
    def context_only(self) -> bool:
        """Only lines no detector reads (LabTrust's results.json counters, a config dump):
        context for the others, not a log whose loops went unjudged."""
        return self.events > 0 and self.actions == 0

    @property
    def understood(self) -> bool:
        if self.context_only:
            return True
        who = max(self.shares.get("actor", 0.0), self.shares.get("session", 0.0))
        return (self.events > 0 and self.shares.get("time", 0.0) >= UNDERSTOOD
                and who >= UNDERSTOOD and any(self.judged_by.values()))

    def missing(self) -> list[str]:
        """The fields whose absence kept this input from being judged."""
        out = [f for f in ("time",) if self.shares.get("time", 0.0) < UNDERSTOOD]
        if max(self.shares.get("actor", 0.0), self.shares.get("session", 0.0)) < UNDERSTOOD:
            out.append("actor or session")
        if not any(self.judged_by.values()):
            out.append("what a detector reads (an error, a receiver, a depth, ...)")
        return out


def measure(con: duckdb.DuckDBPyConnection) -> list[InputCoverage]:
    """Per input: its events, the share carrying each field, and per detector how many of
    them it could judge (events of the kinds it reads carrying what it needs). One pass: the
    events counted by input, kind and which fields they carry (a few hundred rows), from
    which the shares and counts are summed here (seventeen filtered aggregates over every
    event cost three times as much). A column costly to read that only some kinds' detectors
    need (`corr_id`) is looked at only in those kinds' events (`_flag_passes`): reading a
    bproxy log's 1.27 M zstd-compressed request ids to learn that no repair attempt was
    among them made the pass 0.155 s of CPU instead of 0.109 s."""
    needed = sorted({c for d in DETECTORS.values() for group in d.needs for c in group})
    # each condition once (a field's and a detector's need are often one: grouping by a
    # copy of a key only costs)
    flags = list(dict.fromkeys([*FIELDS.values(), *(f"{c} IS NOT NULL" for c in needed)]))
    rows = []
    for source, measured in _flag_passes(flags):
        for input_id, kind, *rest in con.execute(f"""
                SELECT CAST(event_id >> 32 AS INTEGER) AS input_id, kind,
                       {", ".join(f"{flags[i]} AS f{i}" for i in measured)}, count(*) AS n
                FROM ({source}) GROUP BY ALL""").fetchall():
            carries = [False] * len(flags)  # not measured: no reader of the kind needs it
            for i, value in zip(measured, rest[:-1], strict=True):
                carries[i] = value
            rows.append((input_id, kind, *carries, rest[-1]))
    at = {name: flags.index(sql) for name, sql in FIELDS.items()}  # field → its flag's position
    has = {c: flags.index(f"{c} IS NOT NULL") for c in needed}  # column → its flag's position
    all_kinds = {k for d in DETECTORS.values() for k in d.reads}
    per_input: dict[int, list[tuple]] = {}
    for input_id, kind, *rest in rows:
        per_input.setdefault(input_id, []).append((kind, rest[:-1], int(rest[-1])))
    names = dict(con.execute("SELECT input_id, path FROM inputs").fetchall())
    formats = dict(con.execute("SELECT input_id, format FROM inputs").fetchall())
    out = []
    for input_id in sorted(per_input):
        groups = per_input[input_id]
        events = sum(n for _, _, n in groups)
        # a share as DuckDB's avg of 1.0 and 0.0 gives it: carrying / events, one division
        field_shares = {name: round(sum(n for _, f, n in groups if f[at[name]]) / events, 4)
                        for name in FIELDS}
        judged_by = {name: sum(n for kind, f, n in groups if kind in d.reads and all(
            any(f[has[c]] for c in group) for group in d.needs))
            for name, d in DETECTORS.items()}
        out.append(InputCoverage(input_id, names.get(input_id, f"input {input_id}"),
                                 formats.get(input_id) or "", events, field_shares, judged_by,
                                 actions=sum(n for kind, _, n in groups if kind in all_kinds)))
    for cov in out:
        if not cov.understood:
            cov.keys = _keys_of(con, cov.input_id)
    return out


def _flag_passes(flags: list[str]) -> list[tuple[str, list[int]]]:
    """The passes that measure `flags` (conditions over `events`): the events as a query
    and the positions of the flags it measures. Every flag over the events of every kind,
    but those of a column costly to read (`schema.COSTLY_TO_READ`) that no field reads and
    only some kinds' detectors need: those are measured in a pass over the kinds that need
    the same such columns, whose events the first pass leaves out (each event is counted
    once). Those passes read their kinds alone (`events_of_kinds`: each is a scan of the
    kinds), so a log without such events never reads those columns."""
    in_fields = " ".join(FIELDS.values())
    narrow: dict[int, set[str]] = {}  # flag → the kinds whose detectors need its column
    for d in DETECTORS.values():
        for column in {c for group in d.needs for c in group} & set(COSTLY_TO_READ):
            if not re.search(rf"\b{column}\b", in_fields):
                narrow.setdefault(flags.index(f"{column} IS NOT NULL"), set()).update(d.reads)
    by_need: dict[tuple[int, ...], list[str]] = {}  # the narrow flags a kind needs → kinds
    for kind in sorted({k for kinds in narrow.values() for k in kinds}):
        by_need.setdefault(tuple(sorted(i for i, ks in narrow.items() if kind in ks)),
                           []).append(kind)
    wide = [i for i in range(len(flags)) if i not in narrow]
    apart = [k for kinds in by_need.values() for k in kinds]
    rest = "SELECT * FROM events" + (
        f" WHERE kind IS NULL OR kind NOT IN ({', '.join(sql_literal(k) for k in apart)})"
        if apart else "")
    return [(rest, wide)] + [(events_of_kinds(kinds), sorted([*wide, *need]))
                             for need, kinds in by_need.items()]


def _keys_of(con: duckdb.DuckDBPyConnection, input_id: int, limit: int = 20) -> list[str]:
    """The fields of an input's lines that no canonical column holds (`extra`), most common
    first: the keys a mapping file could name."""
    rows = con.execute("""
        SELECT k, count(*) AS n FROM (
          SELECT unnest(json_keys(extra)) AS k FROM events
          WHERE event_id >> 32 = $id AND extra IS NOT NULL AND json_valid(extra) LIMIT 100000)
        GROUP BY k ORDER BY n DESC, k LIMIT $limit""", {"id": input_id, "limit": limit}
                       ).fetchall()
    return [k for k, _ in rows]


def skipped_logs(con: duckdb.DuckDBPyConnection) -> list[dict]:
    """Files ingest passed over although they looked like logs (not recognised, unreadable),
    as the store recorded them; empty for a store from before it did."""
    try:
        rows = con.execute("SELECT path, reason FROM skipped ORDER BY path").fetchall()
    except duckdb.CatalogException:
        return []
    return [{"path": p, "reason": r} for p, r in rows]


def verdict(findings: int, inputs: list[InputCoverage], skipped: list[dict]) -> Verdict:
    """The scan's verdict from what it found and what it could judge (see the module)."""
    if findings:
        return Verdict.FINDINGS
    if not inputs or skipped or any(not i.understood for i in inputs):
        return Verdict.INCONCLUSIVE
    return Verdict.CLEAN


# what a missing field is called in a mapping file ([fields] NAME = "path.in.the.line")
MAPPING_NAMES = {"time": "time", "actor or session": "actor / session"}


def document(findings: int, inputs: list[InputCoverage], skipped: list[dict],
             found_in: frozenset[str] | set[str] = frozenset()) -> dict:
    """The `coverage` object of the findings document. `found_in`: the inputs (paths) some
    finding's events are in: a detector that found a loop there judged those events,
    whatever share of the log carries an actor."""
    judged = {name: sum(i.judged_by.get(name, 0) for i in inputs) for name in DETECTORS}

    def ok(i: InputCoverage) -> bool:
        return i.understood or i.path in found_in

    return {
        "verdict": verdict(findings, inputs, skipped).value,
        "inputs": [{
            "path": i.path, "format": i.format, "events": i.events, "shares": i.shares,
            "judged": ok(i), "context_only": i.context_only,
            "missing": [] if ok(i) else i.missing(),
            "unmapped_keys": i.keys,
        } for i in sorted(inputs, key=lambda i: i.path)],
        "detectors": [{
            "name": name, "events_judged": judged[name],
            "reads": list(d.reads), "needs": [list(g) for g in d.needs],
            "judged": judged[name] > 0,
            "reason": None if judged[name] else
            f"no events of kinds {', '.join(d.reads) or 'any'} carrying "
            + " and ".join("/".join(g) for g in d.needs),
        } for name, d in DETECTORS.items()],
        "skipped": skipped,
    }
